"""What to change, and how much step time it saves: actions (one file per cause under
`causes/`) and `--what-if` another chip. A stage above the report model (it reads costed rows,
steps, memory and the HLO) and under the renderers, which show what it found."""
