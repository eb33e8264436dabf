# MiTA-Segmenter-S: the CBT decoder (CBSAHead) on a ViT-S whose attention
# is MiTA (_base_/models/white_box_encoders.py, mita_vit_s); decoder,
# training and test as cbsa_vit-s (README.md, "Recipe"). Weights:
#   python tools/model_converters/timm2mmseg.py --to white-box \
#       vit_small_patch16_384.pth pretrain/vit_small_patch16_384_white-box.pth
_base_ = ['../cbsa/cbsa_vit-s_8xb1-160k_ade20k-512x512.py',
          '../_base_/models/white_box_encoders.py']
model = dict(pretrained=None, backbone=dict(_base_.mita_vit_s, _delete_=True))
