# CBT-dagger (tied projection back through the bases) on the demo encoder.
_base_ = './cbsa_vit-demo_1xb8-800iter_synthade-128x128.py'
model = dict(decode_head=dict(attn_cfg=dict(out_proj='tied')))
