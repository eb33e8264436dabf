# Runtime shared by every config of this project.
# Importing mmseg_whitebox applies its compatibility layer and registers the
# white-box modules, also when mmseg's own tools or Python APIs load a config.
custom_imports = dict(imports=['mmseg_whitebox'], allow_failed_imports=False)
default_scope = 'mmseg'
env_cfg = dict(
    cudnn_benchmark=True,
    mp_cfg=dict(mp_start_method='fork', opencv_num_threads=0),
    # timeout: seconds a collective step (a barrier, a gradient all-reduce)
    # waits for the other processes before the run stops with an error,
    # rather than hanging; override with --cfg-options
    # env_cfg.dist_cfg.timeout=SECONDS (docs/training.md)
    dist_cfg=dict(backend='nccl', timeout=1800),
)
vis_backends = [dict(type='LocalVisBackend')]
visualizer = dict(
    type='SegLocalVisualizer', vis_backends=vis_backends, name='visualizer')
log_processor = dict(by_epoch=False)
log_level = 'INFO'
load_from = None
resume = False
# Checkpoints store their training state as plain data so that they load
# with torch.load(weights_only=True) (see mmseg_whitebox.compat; this
# project's tools add that hook to any config, mmseg's own tools find it
# here), and torch's random state, so that --resume continues bitwise as
# if the run had not stopped (RNGStateCheckpointHook). Every gradient
# comes laid out as its parameter (GradLayoutHook): at one image per
# process DDP would otherwise warn "Grad strides do not match bucket view
# strides" for the CLS token and class embeddings of mmseg's ViT and
# Segmenter head.
custom_hooks = [
    dict(type='RNGStateCheckpointHook'),
    dict(type='WeightsOnlyCheckpointHook'),
    dict(type='GradLayoutHook')
]
# --tta: mmseg's SegTTAModel averages the views' softmax probabilities
# (each view's logits resized to the original image, its flip undone) and
# takes the argmax: the released multi-scale merge (segm/model/utils.py:
# 140-147,175-177; segm/eval/miou.py:79)
tta_model = dict(type='SegTTAModel')
