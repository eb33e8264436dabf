# MiTA on the CPU demo: the CBT demo model's encoder (4 layers, 96 wide,
# 8x8 patches, a 16x16 token grid per crop, CLS token first, from scratch)
# with ViT layers whose attention is MiTA (3 heads, 4x4 landmarks pooled
# from the patch grid, 16 keys per routed expert, the shared expert mixed
# in) and an MLP, under the CBT decoder of cbsa_vit-demo.
_base_ = '../cbsa/cbsa_cbt-demo_1xb8-800iter_synthade-128x128.py'
model = dict(
    backbone=dict(
        attn_cfg=dict(_delete_=True, type='MiTA', num_heads=3, pool_size=4),
        ffn_cfg=dict(_delete_=True, type='MLP', mlp_ratio=4)))
