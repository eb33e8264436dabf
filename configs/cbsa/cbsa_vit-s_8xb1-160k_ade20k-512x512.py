_base_ = './cbsa_vit-b_8xb1-160k_ade20k-512x512.py'
checkpoint = 'https://download.openmmlab.com/mmsegmentation/v0.5/pretrain/segmenter/vit_small_p16_384_20220308-410f6037.pth'  # noqa
model = dict(
    pretrained=checkpoint,
    backbone=dict(embed_dims=384, num_heads=6),
    decode_head=dict(
        in_channels=384, channels=384, attn_cfg=dict(num_heads=3)))
