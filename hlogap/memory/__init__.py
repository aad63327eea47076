"""Memory, the third limit: what a program holds at its peak (the compiler's buffer assignment,
`static`) and what the allocators held while it ran (`runtime`)."""
