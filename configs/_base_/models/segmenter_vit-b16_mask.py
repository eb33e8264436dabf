# Segmenter (Strudel et al., ICCV 2021): mmseg's VisionTransformer encoder
# and mmseg's SegmenterMaskTransformerHead (initialised as released), set as
# the released training code (rstrudel/segmenter, which the CBT and DEPICT
# code fork) builds them.
# ViT-B/16 sizes; the per-size configs override the widths. The recipe
# table with the released file and line of every value is in
# configs/segmenter/README.md.
checkpoint = 'https://download.openmmlab.com/mmsegmentation/v0.5/pretrain/segmenter/vit_base_p16_384_20220308-96dfe169.pth'  # noqa
# nn.LayerNorm's default eps (segm/model/vit.py:89, segm/model/blocks.py:
# 83-84); mmseg's Segmenter port uses 1e-6
backbone_norm_cfg = dict(type='LN', eps=1e-5, requires_grad=True)
data_preprocessor = dict(
    # mmseg's SegDataPreProcessor, then, at test time only, the released
    # upsampling of a normalised image whose short side is below the
    # sliding window to a short side of the window (bilinear, long side
    # scaled and truncated: segm/model/utils.py:92-104, applied to every
    # test image by inference at :164). The configs that change the window
    # set test_short_side with it.
    type='ShortSideDataPreProcessor',
    # normalization 'vit': mean = std = 0.5 x 255 (segm/data/utils.py:9)
    mean=[127.5, 127.5, 127.5],
    std=[127.5, 127.5, 127.5],
    bgr_to_rgb=True,
    pad_val=0,
    seg_pad_val=255,
    test_short_side=512)
# torch.nn.CrossEntropyLoss(ignore_index=255) (segm/engine.py:20): the mean
# over the pixels that are not ignored. mmseg's default (avg_non_ignore
# False) divides by every pixel of the crop, ignored ones included. Every
# head of this project takes this loss.
loss_decode = dict(
    type='CrossEntropyLoss',
    use_sigmoid=False,
    loss_weight=1.0,
    avg_non_ignore=True)
model = dict(
    type='EncoderDecoder',
    data_preprocessor=data_preprocessor,
    pretrained=checkpoint,
    backbone=dict(
        type='VisionTransformer',
        img_size=(512, 512),
        patch_size=16,
        in_channels=3,
        embed_dims=768,
        num_layers=12,
        num_heads=12,
        # --drop-path 0.1, --dropout 0.0 (segm/train.py:39-40)
        drop_path_rate=0.1,
        attn_drop_rate=0.0,
        drop_rate=0.0,
        final_norm=True,
        norm_cfg=backbone_norm_cfg,
        with_cls_token=True,
        # nn.Conv2d with its bias (segm/model/vit.py:28)
        patch_bias=True,
        # position embeddings resized bilinearly (segm/model/utils.py:37;
        # the pinned timm 0.4.12 loads the pretrained ones the same way)
        interpolate_mode='bilinear',
    ),
    decode_head=dict(
        # mmseg's SegmenterMaskTransformerHead (same modules and keys) with
        # the released initialisation: projections d ** -0.5 * randn
        # (segm/model/decoder.py:57,67-68), attention qkv trunc-normal 0.02
        # with zero bias (segm/model/blocks.py:47, segm/model/utils.py:
        # 12-19), where mmseg draws trunc-normal 0.02 and xavier-uniform
        type='SegmenterMaskTransformerHeadReleasedInit',
        in_channels=768,
        channels=768,
        num_classes=150,
        # 2 layers, dropout 0.1, drop path 0 (segm/config.yml:101-104);
        # the dropout acts on attention weights, projections and MLP
        # (segm/model/blocks.py:24,48,50), as mmseg's attn_drop_rate and
        # drop_rate do
        num_layers=2,
        num_heads=12,
        embed_dims=768,
        drop_path_rate=0.0,
        drop_rate=0.1,
        attn_drop_rate=0.1,
        dropout_ratio=0.0,
        loss_decode=loss_decode,
    ),
    # window = crop, stride = crop - 32 (segm/eval/miou.py:229-232)
    test_cfg=dict(mode='slide', crop_size=(512, 512), stride=(480, 480)),
)
