# A short CPU schedule for the synthetic demo data. The demo encoder is
# trained from scratch, which SGD does poorly in a few hundred iterations,
# so this uses AdamW with a linear warm-up and polynomial decay.
# Validation and the checkpoint happen at the end. To change the length to N
# iterations, set train_cfg.max_iters=N, train_cfg.val_interval=N,
# default_hooks.checkpoint.interval=N and param_scheduler.1.end=N (e.g. with
# --cfg-options); for N <= 50 also move the warm-up end, e.g. N=20:
# param_scheduler.0.end=5 param_scheduler.1.begin=5 (tools/train.py checks
# that every scheduler ends after it begins).
optimizer = dict(type='AdamW', lr=1e-3, betas=(0.9, 0.999), weight_decay=0.01)
optim_wrapper = dict(type='OptimWrapper', optimizer=optimizer, clip_grad=None)
param_scheduler = [
    dict(
        type='LinearLR', start_factor=0.05, begin=0, end=50, by_epoch=False),
    dict(
        type='PolyLR',
        eta_min=1e-5,
        power=0.9,
        begin=50,
        end=800,
        by_epoch=False)
]
# a fixed seed, so that a demo run repeats on the same machine (mmengine
# otherwise draws one per run; the CPU demo then varies by several mIoU)
randomness = dict(seed=0)
# the lr above is for 8 crops per step (1 process x 8); --auto-scale-lr
# scales it to another world batch (see schedule_160k)
auto_scale_lr = dict(enable=False, base_batch_size=8)
train_cfg = dict(
    type='IterBasedTrainLoop', max_iters=800, val_interval=800)
val_cfg = dict(type='ValLoop')
test_cfg = dict(type='TestLoop')
default_hooks = dict(
    timer=dict(type='IterTimerHook'),
    logger=dict(type='LoggerHook', interval=50, log_metric_by_epoch=False),
    param_scheduler=dict(type='ParamSchedulerHook'),
    # the final checkpoint only (iter_800.pth), the one the demo tests and
    # reports; no selection by validation mIoU, as in the published
    # schedules (schedule_160k.py)
    checkpoint=dict(
        type='CheckpointHook', by_epoch=False, interval=800,
        max_keep_ckpts=1),
    sampler_seed=dict(type='DistSamplerSeedHook'),
    visualization=dict(type='SegVisualizationHook'))
