# DEPICT decoder (Wen & Li, NeurIPS 2024) on mmseg's VisionTransformer: the
# Segmenter encoder settings, the Segmenter decode head replaced by 3 MSSA
# layers (tied projection back through the bases, scalar step sizes).
_base_ = './segmenter_vit-b16_mask.py'
model = dict(
    decode_head=dict(
        _delete_=True,
        type='DEPICTHead',
        mode='sa',
        in_channels=768,
        channels=768,
        num_classes=150,
        num_layers=3,
        num_heads=3,
        head_dim=100,
        num_cross_layers=3,
        cross_head_dim=50,
        dropout_ratio=0.0,
        loss_decode=dict(
            type='CrossEntropyLoss', use_sigmoid=False, loss_weight=1.0)))
