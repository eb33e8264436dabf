# ADE20K (SceneParsing, 150 classes), 512x512 crops: the released
# pipeline (segm/data/config/ade20k.py:9-20,36-50, its Resize scale set to
# (4 x 512, 512) by segm/data/base.py:54-62; images resized, flipped and
# photometrically distorted by mmseg's transforms, labels 1..150 -> 0..149).
# CheckedSegDataset builds mmseg's `dataset_type` and checks the split
# (not empty, images and labels in pairs); CheckSegSample checks each
# label (one channel, its image's size, values in range). See
# mmseg_whitebox/datasets/checks.py and the README's troubleshooting.
dataset_type = 'ADE20KDataset'
data_root = 'data/ade/ADEChallengeData2016'
crop_size = (512, 512)
# the test resize target: short side 512, long side at most 4 x 512
img_scale = (2048, 512)
train_pipeline = [
    dict(type='LoadImageFromFile'),
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='CheckSegSample'),
    dict(
        type='RandomResize',
        scale=(2048, 512),
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
    # labels are loaded after Resize: metrics use the original resolution
    dict(type='LoadAnnotations', reduce_zero_label=True),
    dict(type='CheckSegSample'),
    dict(type='PackSegInputs')
]
# --tta: the released multi-scale test (segm/eval/miou.py --multiscale,
# :103-104 -> segm/data/base.py:88-107): mmseg 0.14.1's MultiScaleFlipAug
# (requirements.txt:11), given the test resize target img_scale and these
# ratios, resizes to the target scaled by each ratio, (int(2048 r),
# int(512 r)), keeping the aspect ratio (its "mode 2", mmseg 0.x
# mmseg/datasets/pipelines/test_time_aug.py:68-74), not the original
# image scaled by r (mmseg 1.x's scale_factor); each view is also
# flipped. The data preprocessor then upsamples a view whose short side
# is below the window, the windows slide as in the single-scale test,
# and mmseg's SegTTAModel (_base_/default_runtime.py) averages the
# views' softmax probabilities at the original size, flips undone, as
# segm/model/utils.py:140-147,175-177 does.
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
            img_path='images/training', seg_map_path='annotations/training'),
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
            img_path='images/validation',
            seg_map_path='annotations/validation'),
        pipeline=test_pipeline))
test_dataloader = val_dataloader
val_evaluator = dict(type='IoUMetric', iou_metrics=['mIoU'])
test_evaluator = val_evaluator
