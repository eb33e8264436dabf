# The ToST decoder (TSSA, Wu et al. ICLR 2025) on mmseg's VisionTransformer:
# the Segmenter encoder settings, the decode head replaced by a TSSAHead of
# 3 TSSA layers in the same decoder frame as the MSSA and CBSA heads.
_base_ = './segmenter_vit-b16_mask.py'
model = dict(
    decode_head=dict(
        _delete_=True,
        type='TSSAHead',
        in_channels=768,
        channels=768,
        num_classes=150,
        num_layers=3,
        attn_cfg=dict(type='TSSA', num_heads=6, head_dim=100),
        dropout_ratio=0.0,
        loss_decode=_base_.loss_decode))
