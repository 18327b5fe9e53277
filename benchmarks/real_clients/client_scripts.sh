# Sourced by device_verify_clients.sh and device_traces.sh: each client's script and arguments.
declare -A SCRIPT=(
  [gpt2_generate]="gpt2_generate.py --rounds 4"
  [lora_accum]="lora_accum.py --steps 24"
  [unet_attention]="unet_attention.py --steps 40"
  [hf_bert_trainer]="hf_bert_trainer.py --steps 40"
  [torchvision_detection]="torchvision_detection.py --steps 20"
  [resnet_plain]="resnet50_channels_last.py --plain --steps 40"
  [timm_cnn]="timm_cnn.py --steps 40"
  [timm_convnext]="timm_cnn.py --model convnext_tiny --batch 32 --steps 40"
)
