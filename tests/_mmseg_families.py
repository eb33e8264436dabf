"""mmseg's own configs, inherited (``mmseg::``) and shrunk to CPU size: the
model families the noise evaluator must handle. Each family names its
attention target and how many attention modules the shrunk model has
(counted by class, independently of the registry)."""
import textwrap

# ResNet-18 in place of the d8 ResNet-50s (same dilations and strides)
RESNET18 = ("pretrained=None, backbone=dict(depth=18, init_cfg=None), "
            "auxiliary_head=dict(in_channels=256, channels=16)")

# BEiT and MAE (a BEiT subclass) at 4 layers, 32 wide
BEIT = """pretrained=None,
            backbone=dict(img_size=(64, 64), embed_dims=32, num_layers=4,
                          num_heads=2, out_indices=(0, 1, 2, 3),
                          init_cfg=None),
            neck=dict(embed_dim=32),
            decode_head=dict(in_channels=[32, 32, 32, 32], channels=16),
            auxiliary_head=dict(in_channels=32, channels=16),
            test_cfg=dict(mode='whole')"""

FAMILIES = {
    'segmenter': dict(
        base='segmenter/segmenter_vit-t_mask_8xb1-160k_ade20k-512x512.py',
        target='decoder-attention', classes=('MultiheadAttention', ),
        model="""pretrained=None,
            backbone=dict(img_size=(64, 64), embed_dims=32, num_layers=2,
                          num_heads=2, init_cfg=None),
            decode_head=dict(in_channels=32, channels=32, embed_dims=32,
                             num_layers=2, num_heads=2),
            test_cfg=dict(mode='whole')"""),
    'segformer': dict(
        base='segformer/segformer_mit-b0_8xb2-160k_ade20k-512x512.py',
        target='encoder-attention',
        classes=('EfficientMultiheadAttention', ),
        model="""pretrained=None,
            backbone=dict(embed_dims=16, num_layers=[1, 1, 1, 1],
                          init_cfg=None),
            decode_head=dict(in_channels=[16, 32, 80, 128], channels=32)"""),
    'swin': dict(
        base='swin/swin-tiny-patch4-window7-in1k-pre_upernet_8xb2-160k_'
        'ade20k-512x512.py',
        target='encoder-attention', classes=('ShiftWindowMSA', ),
        model="""pretrained=None,
            backbone=dict(embed_dims=16, depths=[2, 2, 2, 2],
                          num_heads=[1, 2, 2, 4], window_size=4,
                          init_cfg=None),
            decode_head=dict(in_channels=[16, 32, 64, 128], channels=16),
            auxiliary_head=dict(in_channels=64, channels=16)"""),
    'beit': dict(
        base='beit/beit-base_upernet_8xb2-160k_ade20k-640x640.py',
        target='encoder-attention', classes=('BEiTAttention', ),
        model=BEIT),
    'knet': dict(
        base='knet/knet-s3_r50-d8_fcn_8xb2-adamw-80k_ade20k-512x512.py',
        target='decoder-attention', classes=('MultiheadAttention', ),
        model=RESNET18 + """,
            decode_head=dict(
                kernel_generate_head=dict(in_channels=512, channels=32),
                kernel_update_head=[
                    dict(type='KernelUpdateHead', num_classes=150,
                         num_ffn_fcs=2, num_heads=2, num_mask_fcs=1,
                         feedforward_channels=64, in_channels=32,
                         out_channels=32, dropout=0.0, conv_kernel_size=1,
                         ffn_act_cfg=dict(type='ReLU', inplace=True),
                         with_ffn=True,
                         feat_transform_cfg=dict(
                             conv_cfg=dict(type='Conv2d'), act_cfg=None),
                         kernel_updator_cfg=dict(
                             type='KernelUpdator', in_channels=32,
                             feat_channels=32, out_channels=32,
                             act_cfg=dict(type='ReLU', inplace=True),
                             norm_cfg=dict(type='LN')))
                    for _ in range(3)])"""),
    'nonlocal': dict(
        base='nonlocal_net/nonlocal_r50-d8_4xb4-80k_ade20k-512x512.py',
        target='decoder-attention', classes=('NonLocal2d', ),
        model=RESNET18 + ", decode_head=dict(in_channels=512, channels=16)"),
    'danet': dict(
        base='danet/danet_r50-d8_4xb4-80k_ade20k-512x512.py',
        target='decoder-attention', classes=('PAM', 'CAM'),
        model=RESNET18 + """,
            decode_head=dict(in_channels=512, channels=16, pam_channels=8)"""),
    'isanet': dict(
        base='isanet/isanet_r50-d8_4xb4-80k_ade20k-512x512.py',
        target='decoder-attention', classes=('SelfAttentionBlock', ),
        model=RESNET18 + """,
            decode_head=dict(in_channels=512, channels=16, isa_channels=16)"""),
    'ann': dict(
        base='ann/ann_r50-d8_4xb4-80k_ade20k-512x512.py',
        target='decoder-attention', classes=('SelfAttentionBlock', ),
        model=RESNET18 + """,
            decode_head=dict(in_channels=[256, 512], channels=16,
                             project_channels=16)"""),
    'deeplabv3': dict(
        base='deeplabv3/deeplabv3_r50-d8_4xb4-80k_ade20k-512x512.py',
        target='decoder-attention', classes=(),
        model=RESNET18 + ", decode_head=dict(in_channels=512, channels=16)"),
}


# families only the registry's contract tests build (no data): the
# remaining registry entries, inside mmseg models
CONTRACT_FAMILIES = {
    'twins-svt': dict(
        base='twins/twins_svt-s_fpn_fpnhead_8xb4-80k_ade20k-512x512.py',
        target='encoder-attention',
        classes=('LocallyGroupedSelfAttention', 'GlobalSubsampledAttention'),
        model="""backbone=dict(embed_dims=[16, 32, 32, 64],
                          num_heads=[1, 2, 2, 4], depths=[2, 2, 2, 2],
                          windiow_sizes=[4, 4, 4, 4], init_cfg=None),
            neck=dict(in_channels=[16, 32, 32, 64], out_channels=16),
            decode_head=dict(in_channels=[16, 16, 16, 16], channels=16)"""),
    'mae': dict(
        base='mae/mae-base_upernet_8xb2-amp-160k_ade20k-512x512.py',
        target='encoder-attention', classes=('MAEAttention', ),
        model=BEIT),
    'dnl': dict(
        base='dnlnet/dnl_r50-d8_4xb4-80k_ade20k-512x512.py',
        target='decoder-attention', classes=('DisentangledNonLocal2d', ),
        model=RESNET18 + ", decode_head=dict(in_channels=512, channels=16)"),
    'ocrnet': dict(
        base='_base_/models/ocrnet_r50-d8.py',
        target='decoder-attention', classes=('ObjectAttentionBlock', ),
        model="""pretrained=None, backbone=dict(depth=18, init_cfg=None),
            decode_head=[
                dict(_base_.model.decode_head[0], in_channels=256,
                     channels=16),
                dict(_base_.model.decode_head[1], in_channels=512,
                     channels=16, ocr_channels=16)]"""),
    'emanet': dict(
        base='_base_/models/emanet_r50-d8.py',
        target='decoder-attention', classes=('EMAModule', ),
        model=RESNET18 + """,
            decode_head=dict(in_channels=512, channels=16, ema_channels=16,
                             num_bases=8)"""),
}


def family_config_text(name: str, data_root: str) -> str:
    """The shrunk config of family ``name`` reading ``data_root``: its
    mmseg config inherited, the model shrunk, and the test images resized
    to 64x64 (whole-image inference, one window per image)."""
    family = {**FAMILIES, **CONTRACT_FAMILIES}[name]
    if name in CONTRACT_FAMILIES:
        return textwrap.dedent(f"""\
            _base_ = 'mmseg::{family['base']}'
            model = dict(
                {family['model']})
            """)
    return textwrap.dedent(f"""\
        _base_ = 'mmseg::{family['base']}'
        model = dict(
            data_preprocessor=dict(size=(64, 64)),
            {family['model']})
        test_pipeline = [
            dict(type='LoadImageFromFile'),
            dict(type='Resize', scale=(64, 64), keep_ratio=False),
            dict(type='LoadAnnotations', reduce_zero_label=True),
            dict(type='PackSegInputs')]
        val_dataloader = dict(
            batch_size=1, num_workers=0, persistent_workers=False,
            dataset=dict(data_root={data_root!r}, pipeline=test_pipeline))
        test_dataloader = val_dataloader
        """)
