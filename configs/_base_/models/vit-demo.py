# The CPU demo encoder shared by every *_vit-demo_* config: a 4-layer,
# 96-wide ViT with 8x8 patches (16x16 tokens per 128x128 crop of the
# synthetic data), trained from scratch, and whole-image inference on the
# (non-square) validation images.
# Not a model on its own: a demo config lists a model base and this file,
# and merges `vit_demo` into its model, so that every head sits on the same
# encoder:
#     model = dict(_base_.vit_demo, decode_head=dict(in_channels=96, ...))
vit_demo = dict(
    pretrained=None,
    data_preprocessor=dict(size=(128, 128)),
    backbone=dict(
        img_size=(128, 128),
        patch_size=8,
        embed_dims=96,
        num_layers=4,
        num_heads=3,
        drop_path_rate=0.0),
    test_cfg=dict(mode='whole'))
