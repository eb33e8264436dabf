# The CBT decoder on the CPU demo encoder (_base_/models/vit-demo.py): 3
# CBSA layers, 3 subspaces x 32 dims at width 96, a 5x5 grid of
# representatives for the 16x16 token grid of a crop.
_base_ = [
    '../_base_/models/cbsa_vit-b16.py', '../_base_/models/vit-demo.py',
    '../_base_/datasets/synthetic_ade20k.py', '../_base_/default_runtime.py',
    '../_base_/schedules/schedule_demo_whitebox.py'
]
model = dict(
    _base_.vit_demo,
    decode_head=dict(
        in_channels=96,
        channels=96,
        # the paper's stop-gradient (eq. 5), as the demo was measured
        attn_cfg=dict(
            num_heads=3, head_dim=32, rep_grid=(5, 5), rep_stop_grad=True),
        loss_decode=_base_.demo_loss))
