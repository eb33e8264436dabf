# Non-local (Wang et al., CVPR 2018) as mmseg's NLHead on the CPU demo
# encoder: an embedded-Gaussian non-local block over the 16x16 token grid
# (query, key and value 96 / reduction 2 = 48 channels, as mmseg's
# nonlocal_r50-d8 halves its 512) between the head's two 3x3 convolutions.
_base_ = [
    '../_base_/models/attention-heads_vit-demo.py',
    '../_base_/datasets/synthetic_ade20k.py', '../_base_/default_runtime.py',
    '../_base_/schedules/schedule_demo.py'
]
model = dict(
    decode_head=dict(
        type='NLHead', reduction=2, use_scale=True,
        mode='embedded_gaussian'))
