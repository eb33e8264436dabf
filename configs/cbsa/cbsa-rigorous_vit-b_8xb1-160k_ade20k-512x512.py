# CBT-dagger: the rigorous CBSA, projecting back through the same bases
# (no output linear).
_base_ = './cbsa_vit-b_8xb1-160k_ade20k-512x512.py'
model = dict(decode_head=dict(attn_cfg=dict(out_proj='tied')))
