from sb3_reset_ppo.zoo import main

main()
