# Segmenter head on the CBSA-adapted ViT-S (_base_/models/
# white_box_encoders.py). Weights: tools/model_converters/timm2mmseg.py
#   --to white-box vit_small_patch16_384.pth
#   pretrain/vit_small_patch16_384_white-box.pth
_base_ = ['./segmenter_vit-s_mask_8xb1-160k_ade20k-512x512.py',
          '../_base_/models/white_box_encoders.py']
model = dict(pretrained=None, backbone=dict(_base_.cbsa_vit_s, _delete_=True))
