# The CBSA head on a white-box ToST encoder (TSSA + MLP) of the CPU demo
# size: cbsa_cbt-demo with TSSA (4 subspaces x 24) and an MLP (ratio 4,
# with its residual) in place of CBSA and ISTA.
_base_ = './cbsa_cbt-demo_1xb8-800iter_synthade-128x128.py'
model = dict(
    backbone=dict(
        attn_cfg=dict(_delete_=True, type='TSSA', num_heads=4, head_dim=24),
        ffn_cfg=dict(_delete_=True, type='MLP', mlp_ratio=4)))
