# The ToST decoder on the CPU demo encoder (see the Segmenter demo config,
# which this inherits): 3 TSSA layers, 3 subspaces x 32 dims at width 96.
_base_ = '../segmenter/segmenter_vit-demo_mask_1xb8-800iter_synthade-128x128.py'
model = dict(
    decode_head=dict(
        _delete_=True,
        type='TSSAHead',
        in_channels=96,
        channels=96,
        num_classes=150,
        num_layers=3,
        num_heads=3,
        head_dim=32,
        loss_decode=dict(
            type='CrossEntropyLoss', use_sigmoid=False, loss_weight=1.0)))
optim_wrapper = dict(
    paramwise_cfg=dict(custom_keys=dict(cls_emb=dict(decay_mult=0.0))))
