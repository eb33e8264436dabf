# ISANet (Huang et al., 2019) as mmseg's ISAHead on the CPU demo encoder:
# interlaced sparse self-attention, global then local, over the 16x16 token
# grid cut into 4x4 groups of 4x4 tokens (mmseg's down_factor (8, 8) is for
# a 64x64 map; a grid of another size is padded), 48 key channels (half the
# width, as mmseg's isanet_r50-d8 sets 256 of 512).
_base_ = [
    '../_base_/models/attention-heads_vit-demo.py',
    '../_base_/datasets/synthetic_ade20k.py', '../_base_/default_runtime.py',
    '../_base_/schedules/schedule_demo.py'
]
model = dict(
    decode_head=dict(type='ISAHead', isa_channels=48, down_factor=(4, 4)))
