# The CBSA head on a white-box CRATE encoder (MSSA + ISTA) of the CPU demo
# size: cbsa_cbt-demo with MSSA in place of CBSA (3 subspaces x 32, the
# over-parameterised output, no step size, as CRATE).
_base_ = './cbsa_cbt-demo_1xb8-800iter_synthade-128x128.py'
model = dict(
    backbone=dict(
        attn_cfg=dict(
            _delete_=True, type='MSSA', num_heads=3, head_dim=32,
            out_proj='linear', basis_init='trunc_normal', step_size=False)))
