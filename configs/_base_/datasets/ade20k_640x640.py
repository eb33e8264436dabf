# ADE20K with 640x640 crops (ViT-L models): trained at image size 640
# (Resize scale (4 x 640, 640)), tested as the released evaluation does,
# with ADE20K's test pipeline: segm/eval/miou.py:227-228 resizes every
# model's images to ADE20K's image size 512 (segm/config.yml:111); the
# ViT-L configs' data preprocessor (test_short_side=640) then upsamples
# the normalised image, whose short side is below the 640 window, to a
# short side of 640 (bilinear) before the sliding window, as
# segm/model/utils.py:92-104,164 does. The multi-scale test (--tta) is
# ADE20K's too.
_base_ = './ade20k.py'
crop_size = (640, 640)
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='CheckSegSample'),
    dict(
        type='RandomResize',
        scale=(2560, 640),
        ratio_range=(0.5, 2.0),
        keep_ratio=True),
    dict(type='RandomCrop', crop_size=crop_size, cat_max_ratio=0.75),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PhotoMetricDistortion'),
    dict(type='PackSegInputs')
]
train_dataloader = dict(dataset=dict(pipeline=train_pipeline))
