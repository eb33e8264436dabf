# A CPU-sized Segmenter for the synthetic ADE20K-layout data: a 4-layer,
# 96-wide ViT with 8x8 patches (16x16 tokens per 128x128 crop), trained from
# scratch, and mmseg's mask transformer head. The demo configs of the other
# decoders inherit this one, so every head sits on the same encoder.
_base_ = [
    '../_base_/models/segmenter_vit-b16_mask.py',
    '../_base_/datasets/synthetic_ade20k.py', '../_base_/default_runtime.py',
    '../_base_/schedules/schedule_demo.py'
]
crop_size = (128, 128)
model = dict(
    pretrained=None,
    data_preprocessor=dict(size=crop_size),
    backbone=dict(
        img_size=crop_size,
        patch_size=8,
        embed_dims=96,
        num_layers=4,
        num_heads=3,
        drop_path_rate=0.0),
    decode_head=dict(
        in_channels=96, channels=96, num_heads=3, embed_dims=96),
    # whole-image inference on the (non-square) validation images
    test_cfg=dict(mode='whole'))
