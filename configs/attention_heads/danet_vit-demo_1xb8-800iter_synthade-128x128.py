# DANet (Fu et al., CVPR 2019) as mmseg's DAHead on the CPU demo encoder:
# position attention (query and key 96 / 8 = 12 channels, the paper's C/8,
# as mmseg's danet_r50-d8 sets 64 of 512) and channel attention, each
# between two 3x3 convolutions, summed; trained with mmseg's three losses
# (summed, position-only and channel-only logits), tested on the sum.
_base_ = [
    '../_base_/models/attention-heads_vit-demo.py',
    '../_base_/datasets/synthetic_ade20k.py', '../_base_/default_runtime.py',
    '../_base_/schedules/schedule_demo.py'
]
model = dict(decode_head=dict(type='DAHead', pam_channels=12))
