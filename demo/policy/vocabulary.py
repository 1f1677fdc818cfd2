"""Every word the demo's prompts and tool calls use; the tokenizer maps each to one token."""

from demo.product.grammar import BUGS, CHUNKS, FILES, FIXES, PARTS, SUBAGENTS, TOOLS, TOPICS

# The words of the prompts the task environments write (digits and ':' are tokenizer base symbols).
PROMPT_WORDS = (
    "coding", "files", "bug", "in", "error", "asked", "failed",
    "find", "budget", "ctx", "over", "all",
    "orchestrate", "parts", "agents", "none", "todo",
    "subagent", "do",
)

VOCABULARY: tuple[str, ...] = tuple(
    dict.fromkeys([*TOOLS, *PROMPT_WORDS, *BUGS, *FIXES, *FILES, *TOPICS, *CHUNKS, *SUBAGENTS, *PARTS])
)
