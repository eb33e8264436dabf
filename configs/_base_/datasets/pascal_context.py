# Pascal Context, 60 classes (background is class 0, not ignored), 480x480
# crops: the released pipeline (segm/data/pascal_context.py:19-21,
# segm/data/config/pascal_context.py:2,11-22,38-52; image size 520 and the
# Resize scale (8 x 520, 520) set by segm/data/base.py:54-62 from
# segm/config.yml:120).
# CheckedSegDataset builds mmseg's `dataset_type` and checks the split
# (not empty, images and labels in pairs); CheckSegSample checks each
# label (one channel, its image's size, values in range). See
# mmseg_whitebox/datasets/checks.py and the README's troubleshooting.
dataset_type = 'PascalContextDataset'
data_root = 'data/VOCdevkit/VOC2010/'
img_scale = (4160, 520)
crop_size = (480, 480)
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations'),
    dict(type='CheckSegSample'),
    dict(
        type='RandomResize',
        scale=img_scale,
        ratio_range=(0.5, 2.0),
        keep_ratio=True),
    dict(type='RandomCrop', crop_size=crop_size, cat_max_ratio=0.75),
    dict(type='RandomFlip', prob=0.5),
    dict(type='PhotoMetricDistortion'),
    dict(type='PackSegInputs')
]
test_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='Resize', scale=img_scale, keep_ratio=True),
    dict(type='LoadAnnotations'),
    dict(type='CheckSegSample'),
    dict(type='PackSegInputs')
]
# --tta: the released multi-scale test, as in ade20k.py: the test resize
# target scaled by each ratio, (int(4160 r), int(520 r)), unflipped and
# flipped (segm/eval/miou.py:103-104, segm/data/base.py:88-107, mmseg
# 0.14.1's MultiScaleFlipAug); the views' softmax averaged by SegTTAModel
img_ratios = [0.5, 0.75, 1.0, 1.25, 1.5, 1.75]  # segm/data/base.py:89-96
tta_pipeline = [
    dict(type='LoadImageFromFile', backend_args=None),
    dict(
        type='TestTimeAug',
        transforms=[
            [
                dict(
                    type='Resize',
                    scale=(int(img_scale[0] * r), int(img_scale[1] * r)),
                    keep_ratio=True) for r in img_ratios
            ],
            [
                dict(type='RandomFlip', prob=0., direction='horizontal'),
                dict(type='RandomFlip', prob=1., direction='horizontal')
            ], [dict(type='LoadAnnotations')],
            [dict(type='CheckSegSample')], [dict(type='PackSegInputs')]
        ])
]
train_dataloader = dict(
    batch_size=4,
    num_workers=4,
    persistent_workers=True,
    sampler=dict(type='InfiniteSampler', shuffle=True),
    dataset=dict(
        type='CheckedSegDataset',
        dataset_type=dataset_type,
        data_root=data_root,
        data_prefix=dict(
            img_path='JPEGImages', seg_map_path='SegmentationClassContext'),
        ann_file='ImageSets/SegmentationContext/train.txt',
        pipeline=train_pipeline))
val_dataloader = dict(
    batch_size=1,
    num_workers=4,
    persistent_workers=True,
    sampler=dict(type='DefaultSampler', shuffle=False),
    dataset=dict(
        type='CheckedSegDataset',
        dataset_type=dataset_type,
        data_root=data_root,
        data_prefix=dict(
            img_path='JPEGImages', seg_map_path='SegmentationClassContext'),
        ann_file='ImageSets/SegmentationContext/val.txt',
        pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(type='IoUMetric', iou_metrics=['mIoU'])
test_evaluator = val_evaluator
