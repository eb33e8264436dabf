"""Weight conversion into this project's modules: timm / AugReg ViTs
(:mod:`.vit`), the white-box encoders' released checkpoints
(:mod:`.white_box`), the Segmenter-codebase models with their released
``variant.yml`` (:mod:`.segmenter`), the file handling the converter tools
share (:mod:`.state_dicts`) and the weights-only re-encoding of a trusted
checkpoint (:mod:`.weights_only`)."""
