_base_ = './tssa_vit-b_8xb1-160k_ade20k-512x512.py'
checkpoint = 'https://download.openmmlab.com/mmsegmentation/v0.5/pretrain/segmenter/vit_tiny_p16_384_20220308-cce8c795.pth'  # noqa
model = dict(
    pretrained=checkpoint,
    backbone=dict(embed_dims=192, num_heads=3),
    decode_head=dict(
        in_channels=192, channels=192, attn_cfg=dict(num_heads=3)))
