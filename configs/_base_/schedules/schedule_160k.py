# SGD with polynomial decay for 160k iterations: the ADE20K schedule of
# Segmenter, DEPICT and CBT, with their optimizer (lr 0.001, no weight
# decay; a config with another lr sets optimizer and optim_wrapper).
optimizer = dict(type='SGD', lr=0.001, momentum=0.9, weight_decay=0.0)
optim_wrapper = dict(type='OptimWrapper', optimizer=optimizer, clip_grad=None)
param_scheduler = [
    dict(
        type='PolyLR',
        eta_min=1e-4,
        power=0.9,
        begin=0,
        end=160000,
        by_epoch=False)
]
train_cfg = dict(
    type='IterBasedTrainLoop', max_iters=160000, val_interval=16000)
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')
default_hooks = dict(
    timer=dict(type='IterTimerHook'),
    logger=dict(type='LoggerHook', interval=50, log_metric_by_epoch=False),
    param_scheduler=dict(type='ParamSchedulerHook'),
    # the last 3 interval checkpoints and the best by validation mIoU
    # (best_mIoU_iter_*.pth); schedule_80k inherits both settings
    checkpoint=dict(
        type='CheckpointHook', by_epoch=False, interval=16000,
        max_keep_ckpts=3, save_best='mIoU'),
    sampler_seed=dict(type='DistSamplerSeedHook'),
    visualization=dict(type='SegVisualizationHook'))
