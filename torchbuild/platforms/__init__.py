"""What differs by target platform: build toolchains and environments, binary formats (PE, ELF) and the host
tools that run them (Wine). These modules never see a Plan."""
