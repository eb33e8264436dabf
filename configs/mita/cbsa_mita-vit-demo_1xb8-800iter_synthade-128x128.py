# MiTA on the CPU demo: the demo ViT (_base_/models/vit-demo.py: 4 layers,
# 96 wide, 8x8 patches, a 16x16 token grid per crop) with every attention
# MiTA (3 heads, 4x4 landmarks pooled from the patch grid, 16 keys per
# routed expert, the shared expert mixed in), trained from scratch under
# the CBT decoder of cbsa_vit-demo.
_base_ = '../cbsa/cbsa_vit-demo_1xb8-800iter_synthade-128x128.py'
model = dict(
    backbone=dict(
        _delete_=True,
        type='WhiteBoxViT',
        img_size=(128, 128),
        patch_size=8,
        embed_dims=96,
        num_layers=4,
        attn_cfg=dict(type='MiTA', num_heads=3, pool_size=4),
        ffn_cfg=dict(type='MLP', mlp_ratio=4),
        final_norm=True,
        with_cls_token=True,
        interpolate_mode='bicubic'))
