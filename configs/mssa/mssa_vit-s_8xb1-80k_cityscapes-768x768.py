_base_ = [
    '../_base_/models/mssa_vit-b16.py',
    '../_base_/datasets/cityscapes_768x768.py', '../_base_/default_runtime.py',
    '../_base_/schedules/schedule_80k_cityscapes.py'
]
crop_size = (768, 768)
checkpoint = 'https://download.openmmlab.com/mmsegmentation/v0.5/pretrain/segmenter/vit_small_p16_384_20220308-410f6037.pth'  # noqa
model = dict(
    pretrained=checkpoint,
    # pad to the crop in training; upsample test images below the
    # window (segm/model/utils.py:92-104,164)
    data_preprocessor=dict(size=crop_size, test_short_side=crop_size[0]),
    backbone=dict(img_size=crop_size, embed_dims=384, num_heads=6),
    decode_head=dict(
        in_channels=384,
        channels=384,
        num_classes=19),
    test_cfg=dict(mode='slide', crop_size=crop_size, stride=(736, 736)))
# batch 8 = 8 GPUs x 1
train_dataloader = dict(batch_size=1)
