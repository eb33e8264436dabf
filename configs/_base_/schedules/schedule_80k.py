# The Pascal Context schedule of the released training code: 256 epochs of
# its 4,996 training images at batch 16, i.e. 256 x ceil(4996 / 16) =
# 80,128 iterations (segm/config.yml:116-118), with the optimizer and
# polynomial decay of schedule_160k. Cityscapes (216 epochs, batch 8, lr
# 0.01) is schedule_80k_cityscapes.
_base_ = './schedule_160k.py'
released_iters = 256 * 313
# the released world batch (8 GPUs x 2 images), see schedule_160k
auto_scale_lr = dict(base_batch_size=16)
param_scheduler = [
    dict(
        type='PolyLR',
        eta_min=1e-5,
        power=0.9,
        begin=0,
        end=released_iters + 1,
        by_epoch=False)
]
train_cfg = dict(
    type='IterBasedTrainLoop', max_iters=released_iters, val_interval=8000)
default_hooks = dict(
    checkpoint=dict(type='CheckpointHook', by_epoch=False, interval=8000))
