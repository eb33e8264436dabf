# CBT decoder (CBSA, Wen et al. NeurIPS 2025) on mmseg's VisionTransformer:
# the Segmenter encoder settings, the Segmenter decode head replaced by 3
# CBSA layers with a 10x10 grid of representatives per subspace.
_base_ = './segmenter_vit-b16_mask.py'
model = dict(
    decode_head=dict(
        _delete_=True,
        type='CBSAHead',
        in_channels=768,
        channels=768,
        num_classes=150,
        num_layers=3,
        attn_cfg=dict(
            type='CBSA',
            num_heads=6,
            head_dim=100,
            rep_grid=(10, 10),
            out_proj='linear'),
        dropout_ratio=0.0,
        loss_decode=dict(
            type='CrossEntropyLoss', use_sigmoid=False, loss_weight=1.0)))
