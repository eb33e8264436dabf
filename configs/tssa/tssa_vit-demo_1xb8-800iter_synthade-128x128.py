# The ToST decoder (TSSAHead) on the CPU demo encoder
# (_base_/models/vit-demo.py): 3 TSSA layers, 3 subspaces x 32 dims at
# width 96.
_base_ = [
    '../_base_/models/tssa_vit-b16.py', '../_base_/models/vit-demo.py',
    '../_base_/datasets/synthetic_ade20k.py', '../_base_/default_runtime.py',
    '../_base_/schedules/schedule_demo_whitebox.py'
]
model = dict(
    _base_.vit_demo,
    decode_head=dict(
        in_channels=96,
        channels=96,
        attn_cfg=dict(num_heads=3, head_dim=32),
        loss_decode=_base_.demo_loss))
