# The DEPICT decoders (Wen & Li, NeurIPS 2024) on mmseg's VisionTransformer:
# the Segmenter encoder settings, the Segmenter decode head replaced by an
# MSSAHead of 3 MSSA layers (tied projection back through the bases, scalar
# step sizes). mode='sa' is DEPICT-SA; mode='ca' (DEPICT-CA) adds 3
# cross-attention layers whose operator is attn_cfg updated by
# cross_attn_cfg.
_base_ = './segmenter_vit-b16_mask.py'
model = dict(
    decode_head=dict(
        _delete_=True,
        type='MSSAHead',
        mode='sa',
        in_channels=768,
        channels=768,
        num_classes=150,
        num_layers=3,
        attn_cfg=dict(
            type='MSSA',
            num_heads=3,
            head_dim=100,
            out_proj='tied',
            basis_init='scaled_normal'),
        num_cross_layers=3,
        cross_attn_cfg=dict(type='CrossMSSA', head_dim=50),
        dropout_ratio=0.0,
        loss_decode=_base_.loss_decode))
