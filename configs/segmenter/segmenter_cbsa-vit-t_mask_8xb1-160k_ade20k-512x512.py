# Segmenter head on the CBSA-adapted ViT-T (_base_/models/
# white_box_encoders.py). Weights: tools/model_converters/timm2mmseg.py
#   --to white-box vit_tiny_patch16_384.pth
#   pretrain/vit_tiny_patch16_384_white-box.pth
_base_ = ['./segmenter_vit-t_mask_8xb1-160k_ade20k-512x512.py',
          '../_base_/models/white_box_encoders.py']
model = dict(pretrained=None, backbone=dict(_base_.cbsa_vit_t, _delete_=True))
