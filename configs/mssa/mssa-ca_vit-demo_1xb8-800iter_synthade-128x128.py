# DEPICT-CA (MSSAHead, mode='ca') on the demo encoder.
_base_ = './mssa_vit-demo_1xb8-800iter_synthade-128x128.py'
model = dict(decode_head=dict(mode='ca'))
