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
    # whole-image inference, no upsampling of small test images (the
    # published configs' released sliding-window test upsamples them)
    data_preprocessor=dict(size=(128, 128), test_short_side=None),
    backbone=dict(
        img_size=(128, 128),
        patch_size=8,
        embed_dims=96,
        num_layers=4,
        num_heads=3,
        drop_path_rate=0.0,
        # the demo's own settings (mmseg's), kept as the README's demo
        # figures were measured; the published configs take the released
        # Segmenter encoder's instead (eps 1e-5, patch bias, bilinear)
        norm_cfg=dict(type='LN', eps=1e-6, requires_grad=True),
        patch_bias=False,
        interpolate_mode='bicubic'),
    test_cfg=dict(mode='whole'))
# The demo heads' loss: mmseg's default reduction (over every pixel of the
# crop), as the README's demo figures were measured; a demo config sets
#     decode_head=dict(..., loss_decode=_base_.demo_loss)
demo_loss = dict(
    type='CrossEntropyLoss',
    use_sigmoid=False,
    loss_weight=1.0,
    avg_non_ignore=False)
