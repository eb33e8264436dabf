# The ADE20K schedule of the released training code (rstrudel/segmenter,
# forked unchanged by CBT and DEPICT): 64 epochs of ADE20K's 20,210 training
# images at batch 8, i.e. 64 x ceil(20210 / 8) = 161,728 iterations
# (segm/config.yml:107-110; segm/train.py:182 sets the schedule's length to
# len(train_loader) * epochs), run here as mmseg's iteration loop. The
# table with every released file and line is in configs/segmenter/README.md.
released_iters = 64 * 2527
# segm/train.py:36-38,141 asks timm 0.4.12 for the optimizer 'sgd', lr
# 0.001, momentum 0.9, weight decay 0; timm's create_optimizer_v2
# (timm/optim/optim_factory.py:115-117) builds torch.optim.SGD with
# nesterov=True for that name.
optimizer = dict(
    type='SGD', lr=0.001, momentum=0.9, nesterov=True, weight_decay=0.0)
optim_wrapper = dict(
    type='OptimWrapper',
    optimizer=optimizer,
    clip_grad=None,  # clip_grad=None (segm/train.py:142)
    # timm's weight-decay filter (optim_factory.py:29-41,101-106): no decay
    # on 1-D parameters (biases, norms), '.bias' and the model's
    # no_weight_decay() names (pos_embed, cls_token, cls_emb). It is inert
    # at weight decay 0 and applies as timm's if a config sets one.
    paramwise_cfg=dict(
        flat_decay_mult=0.0,
        bias_decay_mult=0.0,
        custom_keys=dict(
            pos_embed=dict(decay_mult=0.0),
            cls_token=dict(decay_mult=0.0),
            cls_emb=dict(decay_mult=0.0))))
# PolynomialLR (segm/optim/scheduler.py:24-31), stepped every iteration
# (segm/engine.py:52): lr = (lr0 - min_lr) (1 - t / T)^0.9 + min_lr with
# min_lr 1e-5 and no warm-up (segm/train.py:145-147,183). mmengine's PolyLR
# with eta_min is the same curve when its end is T + 1: it reaches eta_min
# at end - begin - 1 (mmengine/optim/scheduler/param_scheduler.py,
# PolyParamScheduler.total_iters), the released schedule at T.
param_scheduler = [
    dict(
        type='PolyLR',
        eta_min=1e-5,
        power=0.9,
        begin=0,
        end=released_iters + 1,
        by_epoch=False)
]
# The learning rate above is the released one at the released world batch
# (8 GPUs x 1 image). tools/train.py --auto-scale-lr scales it linearly to
# the run's world batch (mmengine: lr x GPUs x batch_size / 8); without it a
# run on other GPUs keeps the lr, so its batch differs from the recipe's.
auto_scale_lr = dict(enable=False, base_batch_size=8)
train_cfg = dict(
    type='IterBasedTrainLoop', max_iters=released_iters, val_interval=16000)
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')
default_hooks = dict(
    timer=dict(type='IterTimerHook'),
    logger=dict(type='LoggerHook', interval=50, log_metric_by_epoch=False),
    param_scheduler=dict(type='ParamSchedulerHook'),
    # The final model, iter_<max_iters>.pth (mmengine's save_last, on by
    # default), is the checkpoint to evaluate and report; the last 3
    # checkpoints are kept, the final one always among them. No checkpoint
    # is selected by validation mIoU: the validation split is the split the
    # papers report (ADE20K, Pascal Context and Cityscapes val), and the
    # released code reports its final model. segm/train.py:161,250-261
    # overwrites log_dir/checkpoint.pth with the current model after every
    # epoch, its evaluation during training only logs (train.py:263-296),
    # and segm/eval/miou.py:188,217 evaluates the checkpoint.pth it is
    # given (README.md:179-184; CBT: QishuaiWen/CBSA README.md:100-104;
    # DEPICT: QishuaiWen/DEPICT README.md:60-65). The other schedules
    # inherit this hook. Selecting on a held-out split instead:
    # docs/training.md#selecting-a-checkpoint.
    checkpoint=dict(
        type='CheckpointHook', by_epoch=False, interval=16000,
        max_keep_ckpts=3),
    sampler_seed=dict(type='DistSamplerSeedHook'),
    visualization=dict(type='SegVisualizationHook'))
