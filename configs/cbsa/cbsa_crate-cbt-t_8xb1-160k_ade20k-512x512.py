# CBSA head on CRATE+CBT-T (_base_/models/white_box_encoders.py)
_base_ = ['./cbsa_vit-t_8xb1-160k_ade20k-512x512.py',
          '../_base_/models/white_box_encoders.py']
model = dict(pretrained=None, backbone=dict(_base_.crate_cbt_t, _delete_=True),
             decode_head=dict(in_channels=192, channels=192))
