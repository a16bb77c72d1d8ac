"""Adapters that hand the knowledge_search tool to agent frameworks.

    adk.py           Google ADK tool (extra "adk")
    openai_tools.py  OpenAI function-calling schema and call handler (no extra needed)
    langchain.py     LangChain retriever (extra "langchain")

Each adapter delegates to ``lore.tool.core.KnowledgeSearch.run`` and never calls a
retriever itself, so screening, redaction, the output cap and the audit record cannot
be bypassed by choosing a different framework. The modules are not imported here: each
needs only its own optional dependency.
"""
