# The CBT segmentation model on the CPU demo: a white-box CBT encoder
# (4 layers of CBSA + ISTA, 96 wide, 3 subspaces x 32, a 4x4 grid of
# representatives for the 16x16 token grid of a crop, CLS token first)
# under the CBSA head of cbsa_vit-demo. Linear in the number of tokens
# end to end.
_base_ = './cbsa_vit-demo_1xb8-800iter_synthade-128x128.py'
model = dict(
    backbone=dict(
        _delete_=True,
        type='WhiteBoxViT',
        img_size=(128, 128),
        patch_size=8,
        embed_dims=96,
        num_layers=4,
        attn_cfg=dict(type='CBSA', num_heads=3, head_dim=32, rep_grid=(4, 4)),
        ffn_cfg=dict(type='ISTA'),
        final_norm=True,
        with_cls_token=True,
        interpolate_mode='bicubic'))
