"""The class's web server: textual-serve's, with access control, a session count and its own pages.

Every request needs the token (from the URL once, then a cookie); a websocket also needs an Origin header
naming the served address, so that no other page a learner visits can drive a session. The pages load
nothing from outside (textual-serve's own template fetches a font stylesheet from a font service), the
static folder lists nothing, and a class that is full says so.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp_jinja2
import jinja2
from aiohttp import web
from textual_serve.server import Server

from tinyllm_tui.serve.lessons import Lesson, Limits, lesson
from tinyllm_tui.serve.session import LearnerSession

COOKIE = "tinyllm_token"
log = logging.getLogger("textual-serve")


@dataclass(frozen=True)
class Access:
    token: str | None  # None: --no-token
    public_url: str  # where learners reach the server (the origin their browser sends)

    @property
    def origin(self) -> str:
        parts = urlsplit(self.public_url)
        return f"{parts.scheme}://{parts.netloc}"

    def allows(self, request: web.Request) -> bool:
        if self.token is None:
            return True
        given = request.query.get("token") or request.cookies.get(COOKIE) or ""
        return hmac.compare_digest(given.encode(), self.token.encode())

    def link(self) -> str:
        return self.public_url + ("" if self.token is None else f"/?token={self.token}")


class ClassServer(Server):
    def __init__(self, lessons: list[Lesson], limits: Limits, access: Access, host: str, port: int):
        super().__init__("tinyllm-tui", host=host, port=port, title="tinyllm-tui", public_url=access.public_url)
        self.public_url = self.public_url.rstrip("/")
        self.lessons, self.limits, self.access = lessons, limits, access
        self.sessions: set[LearnerSession] = set()

    async def _make_app(self) -> web.Application:
        app = web.Application(middlewares=[self.guard])
        aiohttp_jinja2.setup(app, loader=jinja2.FileSystemLoader(str(files("tinyllm_tui.serve") / "templates")),
                             autoescape=True)
        app.add_routes([
            web.get("/", self.handle_index, name="index"),
            web.get("/lesson/{number}", self.handle_lesson, name="lesson"),
            web.get("/ws/{number}", self.handle_websocket, name="websocket"),
            web.get("/download/{key}", self.handle_download, name="download"),
            web.static("/static", self.statics_path, show_index=False, name="static"),
        ])
        app.on_startup.append(self.on_startup)
        app.on_shutdown.append(self.on_shutdown)
        return app

    @web.middleware
    async def guard(self, request: web.Request, handler) -> web.StreamResponse:
        if not self.access.allows(request):
            response = self.page(request, "message.html", 403, message="This address needs the link your teacher "
                                 "gave, with its token.")
        elif "token" in request.query and request.method == "GET" and not request.path.startswith("/ws/"):
            # the token leaves the address bar (and the browser's history) for a cookie
            kept = {name: value for name, value in request.query.items() if name != "token"}
            response = web.Response(status=302, headers={"Location": str(request.rel_url.with_query(kept))})
            response.set_cookie(COOKIE, self.access.token, httponly=True, samesite="Strict",
                                secure=self.public_url.startswith("https:"))
        else:
            response = await handler(request)
        if not response.prepared:  # a websocket's headers are gone already
            response.headers.setdefault("Content-Security-Policy", self.policy())
            response.headers.setdefault("X-Content-Type-Options", "nosniff")
        return response

    def policy(self) -> str:
        """Nothing from outside: scripts, styles and fonts from here, the websocket to here."""
        socket = "wss" if self.public_url.startswith("https:") else "ws"
        netloc = urlsplit(self.public_url).netloc
        return (f"default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
                f"img-src 'self' data:; font-src 'self'; connect-src 'self' {socket}://{netloc}; "
                "frame-ancestors 'none'")

    def page(self, request: web.Request, template: str, status: int = 200, **context) -> web.Response:
        return aiohttp_jinja2.render_template(template, request, {"static": f"{self.public_url}/static/", **context},
                                              status=status)

    def full(self) -> bool:
        return len(self.sessions) >= self.limits.max_sessions

    def full_page(self, request: web.Request) -> web.Response:
        return self.page(request, "message.html", 503, message=f"The class is full: all {self.limits.max_sessions}"
                         " places are taken. Try again when someone has finished.")

    async def handle_index(self, request: web.Request) -> web.Response:
        if len(self.lessons) == 1:
            return await self.handle_lesson(request, 0)
        return self.page(request, "lessons.html", lessons=[(f"lesson/{n}", lesson.name)
                                                            for n, lesson in enumerate(self.lessons)])

    async def handle_lesson(self, request: web.Request, number: int | None = None) -> web.Response:
        number = self._number(request) if number is None else number
        if self.full():
            return self.full_page(request)
        socket = "wss:" if self.public_url.startswith("https:") else "ws:"
        return self.page(request, "app.html", title=self.lessons[number].name,
                         websocket=f"{socket}{self.public_url.split(':', 1)[1]}/ws/{number}")

    def _number(self, request: web.Request) -> int:
        text = request.match_info["number"]
        if not text.isdigit() or int(text) >= len(self.lessons):
            raise web.HTTPNotFound(text="no such lesson")
        return int(text)

    async def handle_websocket(self, request: web.Request) -> web.StreamResponse:
        number = self._number(request)
        if request.headers.get("Origin") != self.access.origin:
            return web.Response(status=403, text=f"websockets only from {self.access.origin}")
        if self.full():
            return web.Response(status=503, text="the class is full")
        websocket = web.WebSocketResponse(heartbeat=15)
        session = LearnerSession(self.lessons[number], self.limits, write_bytes=websocket.send_bytes,
                                 write_str=websocket.send_str, close=websocket.close,
                                 download_manager=self.download_manager)
        self.sessions.add(session)
        try:
            await websocket.prepare(request)
            await session.start(*session.clamp(request.query.get("width", 80), request.query.get("height", 24)))
            await self._attend(websocket, session)
        except Exception as error:  # a session's end, however it comes, must not stop the class
            log.exception(error)
        finally:
            await session.stop()
            self.sessions.discard(session)
            await websocket.close()
        return websocket

    async def _attend(self, websocket: web.WebSocketResponse, session: LearnerSession) -> None:
        """Pass the browser's messages on until the tab closes, the app ends, or the learner is idle too long."""
        tasks = [asyncio.create_task(self._process_messages(websocket, session)),
                 asyncio.create_task(session.ended()), asyncio.create_task(self._idle(session))]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _idle(self, session: LearnerSession) -> None:
        while session.idle_for() < self.limits.idle_timeout:
            await asyncio.sleep(min(1.0, self.limits.idle_timeout - session.idle_for() + 0.05))

    async def on_startup(self, app: web.Application) -> None:
        names = ", ".join(lesson.name for lesson in self.lessons)
        self.console.print(f"Serving {names} to at most {self.limits.max_sessions} learners on {self.access.link()}",
                           highlight=False, soft_wrap=True)

    async def on_shutdown(self, app: web.Application) -> None:
        await asyncio.gather(*(session.stop() for session in list(self.sessions)))


def serve(files: list[Path], limits: Limits, token: str | None, host: str, port: int,
          public_url: str | None) -> None:
    lessons = [lesson(file) for file in files]
    access = Access(token, (public_url or f"http://{host}:{port}").rstrip("/"))
    ClassServer(lessons, limits, access, host, port).serve()
