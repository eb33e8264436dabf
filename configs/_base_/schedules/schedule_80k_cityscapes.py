# The Cityscapes schedule of the released training code: 216 epochs of its
# 2,975 training images at batch 8, i.e. 216 x ceil(2975 / 8) = 80,352
# iterations, lr 0.01 (segm/config.yml:125-128); optimizer and polynomial
# decay as schedule_160k.
_base_ = './schedule_80k.py'
released_iters = 216 * 372
optimizer = dict(lr=0.01)
# the released world batch (8 GPUs x 1 image), see schedule_160k
auto_scale_lr = dict(base_batch_size=8)
optim_wrapper = dict(optimizer=optimizer)
param_scheduler = [
    dict(
        type='PolyLR',
        eta_min=1e-5,
        power=0.9,
        begin=0,
        end=released_iters + 1,
        by_epoch=False)
]
train_cfg = dict(max_iters=released_iters)
