_base_ = [
    '../_base_/models/cbsa_vit-b16.py',
    '../_base_/datasets/ade20k_640x640.py', '../_base_/default_runtime.py',
    '../_base_/schedules/schedule_160k.py'
]
crop_size = (640, 640)
checkpoint = 'https://download.openmmlab.com/mmsegmentation/v0.5/pretrain/segmenter/vit_large_p16_384_20220308-d4efb41d.pth'  # noqa
model = dict(
    pretrained=checkpoint,
    # pad to the crop in training; upsample test images below the
    # window (segm/model/utils.py:92-104,164)
    data_preprocessor=dict(size=crop_size, test_short_side=crop_size[0]),
    backbone=dict(
        img_size=crop_size, embed_dims=1024, num_layers=24, num_heads=16),
    decode_head=dict(
        in_channels=1024, channels=1024, attn_cfg=dict(num_heads=9)),
    test_cfg=dict(mode='slide', crop_size=crop_size, stride=(608, 608)))
train_dataloader = dict(batch_size=1)
