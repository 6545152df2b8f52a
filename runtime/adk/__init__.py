"""Google's Agent Development Kit on journal (extra `journal-agents[adk]`).

    from google.adk.apps import App
    from google.adk.runners import Runner
    from runtime.adk import JournalPlugin

    app = App(name="support", root_agent=agent, plugins=[JournalPlugin()])

    async def handler(ctx, question: str) -> str:
        runner = Runner(app=app, session_service=InMemorySessionService())
        ...  # runner.run_async(...) as usual

Inside a handler every model call is a journaled step (`adk.model:{agent}`) and every tool
call one too (`adk.tool:{tool}`); after a crash the resumed handler replays the run without
calling the model or the tools again, and the session ADK rebuilds on the way is the one the
first run had. A tool's request for confirmation waits on the promise
`adk.confirm:{tool}:{call id}`, answered with `journal resolve ID NAME true`."""

from ._plugin import JournalPlugin as JournalPlugin

__all__ = ("JournalPlugin",)
