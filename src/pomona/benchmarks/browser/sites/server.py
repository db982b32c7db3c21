"""The local web: a shop, a recipe site, a dictionary, a search engine over the three, and
MiniWoB++'s task pages, served by one process inside the browser's sandbox.

It runs with the sandbox's own python3 (standard library only) and picks the site by the Host
header, so Chromium reaches `http://shop.pomona.test/` and the rest through one port. Every
request, and every change to the cart, is appended to a JSON-lines state log: the graders read
what the agent applied (filters, sort), saw (product, recipe and word pages) and left in the
cart from it. The server is the only writer of the log (it runs as the sandbox's root, the
browser as an unprivileged user), so a page cannot forge it.

    python3 server.py --port 8800 --data DIR --state LOG [--miniwob DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import html
import json
import mimetypes
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, urlencode, urlsplit

DOMAIN = "pomona.test"
STALL = 3600  # seconds a Hazards answer that never finishes holds its connection
STYLE = """
body{font-family:'DejaVu Sans',sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#20324d;color:#fff;padding:10px 20px;display:flex;gap:20px;align-items:center}
header a{color:#fff;text-decoration:none;font-weight:bold;font-size:20px}
header form{display:flex;gap:6px} header input{width:320px;padding:6px;font-size:15px}
button{padding:6px 12px;font-size:15px;cursor:pointer} main{display:flex;gap:24px;padding:16px 20px}
aside{min-width:190px} aside h3{margin:12px 0 4px;font-size:15px} aside a{display:block;padding:6px 0 2px}
.on{font-weight:bold;color:#0a6b2b} .card{background:#fff;border:1px solid #ddd;padding:8px 12px;margin:0 0 8px}
.card a{font-size:17px} .meta{color:#555;font-size:14px} .sort a{margin-right:12px}
table{border-collapse:collapse} td,th{border:1px solid #ccc;padding:4px 10px;text-align:left}
"""


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


class State:
    """The state log and the shop's cart (one shopper per sandbox: the episode's agent)."""

    def __init__(self, path: str):
        self.path = path
        self.lock = threading.Lock()
        self.cart: dict[str, int] = {}
        self.seq = 0
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        self.file = os.fdopen(fd, "a", buffering=1)

    def log(self, **entry: object) -> None:
        with self.lock:
            self.seq += 1
            self.file.write(json.dumps({"seq": self.seq, **entry}) + "\n")
            self.file.flush()


class Site:
    name = ""
    title = ""

    def __init__(self, data: dict, state: State):
        self.data, self.state = data, state

    def page(self, title: str, body: str, query: str = "") -> str:
        return (
            f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(title)}</title>"
            f"<style>{STYLE}</style></head><body><header><a href='/'>{esc(self.title)}</a>"
            f"<form action='/search' method='get'><input name='q' value='{esc(query)}' "
            f"placeholder='Search {esc(self.title)}' aria-label='Search'>"
            f"<button type='submit'>Search</button></form>{self.nav()}</header>{body}</body></html>"
        )

    def nav(self) -> str:
        return ""

    def route(
        self, method: str, path: str, query: dict[str, str], form: dict[str, str]
    ) -> tuple[int, str, str | None]:
        """(status, html, redirect location)."""
        raise NotImplementedError


def matches(text: str, q: str) -> bool:
    words = text.lower()
    return all(w in words for w in q.lower().split())


def toggle(query: dict[str, str], key: str, value: str) -> str:
    """The listing URL with `key` set to `value`, or removed when it already is."""
    q = {k: v for k, v in query.items() if v}
    if q.get(key) == value:
        q.pop(key)
    else:
        q[key] = value
    return "/search?" + urlencode(q)


def facet(title: str, query: dict[str, str], key: str, options: list[tuple[str, str]]) -> str:
    links = "".join(
        f"<a class='{'on' if query.get(key) == v else ''}' href='{esc(toggle(query, key, v))}'>"
        f"{'&#10003; ' if query.get(key) == v else ''}{esc(label)}</a>"
        for v, label in options
    )
    return f"<h3>{esc(title)}</h3>{links}"


def sorter(query: dict[str, str], options: list[tuple[str, str]]) -> str:
    out = []
    for value, label in options:
        q = {k: v for k, v in query.items() if v and k != "sort"}
        if value:
            q["sort"] = value
        cls = "on" if query.get("sort", "") == value else ""
        out.append(f"<a class='{cls}' href='/search?{esc(urlencode(q))}'>{esc(label)}</a>")
    return "<div class='sort'>Sort by: " + "".join(out) + "</div>"


def stars(rating: float) -> str:
    return f"{rating:.1f} out of 5 stars"


class Shop(Site):
    name, title = "shop", "Pomona Market"
    PRICES = [
        ("under-25", "Under $25", 0, 25),
        ("25-50", "$25 to $50", 25, 50),
        ("50-100", "$50 to $100", 50, 100),
        ("over-100", "Over $100", 100, 10**9),
    ]
    SORTS = [
        ("", "Featured"),
        ("price-asc", "Price: low to high"),
        ("price-desc", "Price: high to low"),
        ("rating", "Average rating"),
    ]

    def nav(self) -> str:
        n = sum(self.state.cart.values())
        return f"<a href='/cart'>Cart ({n})</a>"

    def products(self) -> list[dict]:
        return self.data["products"]

    def route(
        self, method: str, path: str, query: dict[str, str], form: dict[str, str]
    ) -> tuple[int, str, str | None]:
        if method == "POST" and path in ("/cart/add", "/cart/remove"):
            pid = form.get("id", "")
            if pid not in {p["id"] for p in self.products()}:
                return 404, self.page("Not found", "<main>No such product.</main>"), None
            with self.state.lock:
                if path == "/cart/add":
                    self.state.cart[pid] = self.state.cart.get(pid, 0) + 1
                else:
                    self.state.cart.pop(pid, None)
                cart = dict(self.state.cart)
            self.state.log(site=self.name, event="cart", cart=cart)
            return 303, "", "/cart"
        if path == "/":
            cats = sorted({p["category"] for p in self.products()})
            links = "".join(
                f"<div class='card'><a href='/search?category={quote(c)}'>{esc(c)}</a></div>"
                for c in cats
            )
            return (
                200,
                self.page(
                    self.title, f"<main><div><h2>Shop by department</h2>{links}</div></main>"
                ),
                None,
            )
        if path == "/search":
            return 200, self.listing(query), None
        if path.startswith("/product/"):
            p = next((p for p in self.products() if p["id"] == path.rsplit("/", 1)[1]), None)
            if p is None:
                return 404, self.page("Not found", "<main>No such product.</main>"), None
            body = (
                f"<main><div><h1>{esc(p['name'])}</h1><p class='meta'>Brand: {esc(p['brand'])} | "
                f"Colour: {esc(p['color'])} | Department: {esc(p['category'])}</p>"
                f"<p>Rating: {stars(p['rating'])} ({p['reviews']} reviews)</p>"
                f"<p style='font-size:22px'>Price: ${p['price']:.2f}</p><p>Item number: {esc(p['id'])}</p>"
                f"<form action='/cart/add' method='post'><input type='hidden' name='id' value='{esc(p['id'])}'>"
                f"<button type='submit'>Add to cart</button></form></div></main>"
            )
            return 200, self.page(p["name"], body), None
        if path == "/cart":
            rows = ""
            total = 0.0
            for pid, qty in self.state.cart.items():
                p = next(p for p in self.products() if p["id"] == pid)
                total += qty * p["price"]
                rows += (
                    f"<tr><td><a href='/product/{esc(pid)}'>{esc(p['name'])}</a></td><td>{qty}</td>"
                    f"<td>${p['price']:.2f}</td><td><form action='/cart/remove' method='post'>"
                    f"<input type='hidden' name='id' value='{esc(pid)}'><button>Remove</button></form></td></tr>"
                )
            body = (
                f"<main><div><h1>Your cart</h1><table><tr><th>Item</th><th>Qty</th><th>Price</th><th></th></tr>"
                f"{rows}</table><p>Subtotal: ${total:.2f}</p></div></main>"
            )
            return 200, self.page("Cart", body), None
        return 404, self.page("Not found", "<main>Page not found.</main>"), None

    def listing(self, query: dict[str, str]) -> str:
        items = [
            p
            for p in self.products()
            if matches(
                " ".join(str(p[k]) for k in ("name", "kind", "brand", "color", "category")),
                query.get("q", ""),
            )
            and query.get("category", p["category"]) == p["category"]
        ]
        base = items  # facet values come from the matches before the facets narrow them
        if query.get("brand"):
            items = [p for p in items if p["brand"] == query["brand"]]
        if query.get("color"):
            items = [p for p in items if p["color"] == query["color"]]
        if query.get("rating"):
            items = [p for p in items if p["rating"] >= float(query["rating"])]
        if query.get("price"):
            lo, hi = next(
                ((lo, hi) for v, _, lo, hi in self.PRICES if v == query["price"]), (0, 10**9)
            )
            items = [p for p in items if lo <= p["price"] < hi]
        order = query.get("sort", "")
        if order == "price-asc":
            items = sorted(items, key=lambda p: p["price"])
        elif order == "price-desc":
            items = sorted(items, key=lambda p: -p["price"])
        elif order == "rating":
            items = sorted(items, key=lambda p: -p["rating"])
        side = (
            facet(
                "Department",
                query,
                "category",
                [(c, c) for c in sorted({p["category"] for p in base})],
            )
            + facet("Brand", query, "brand", [(b, b) for b in sorted({p["brand"] for p in base})])
            + facet("Colour", query, "color", [(c, c) for c in sorted({p["color"] for p in base})])
            + facet(
                "Customer rating", query, "rating", [("4", "4 stars & up"), ("3", "3 stars & up")]
            )
            + facet("Price", query, "price", [(v, label) for v, label, _, _ in self.PRICES])
        )
        cards = (
            "".join(
                f"<div class='card'><a href='/product/{esc(p['id'])}'>{esc(p['name'])}</a>"
                f"<div class='meta'>${p['price']:.2f} &middot; {stars(p['rating'])} &middot; {esc(p['color'])}</div></div>"
                for p in items
            )
            or "<p>No products match.</p>"
        )
        body = (
            f"<main><aside>{side}</aside><div>{sorter(query, self.SORTS)}"
            f"<p class='meta'>{len(items)} results</p>{cards}</div></main>"
        )
        return self.page("Search results", body, query.get("q", ""))


class Recipes(Site):
    name, title = "recipes", "Pomona Kitchen"
    TIMES = [("30", "30 minutes or less"), ("60", "1 hour or less")]
    SORTS = [
        ("", "Best match"),
        ("rating", "Highest rated"),
        ("quickest", "Quickest"),
        ("reviews", "Most reviewed"),
    ]

    def route(
        self, method: str, path: str, query: dict[str, str], form: dict[str, str]
    ) -> tuple[int, str, str | None]:
        recipes = self.data["recipes"]
        if path == "/":
            cuisines = sorted({r["cuisine"] for r in recipes})
            links = "".join(f"<a href='/search?cuisine={quote(c)}'>{esc(c)}</a> " for c in cuisines)
            return (
                200,
                self.page(
                    self.title, f"<main><div><h2>Browse by cuisine</h2><p>{links}</p></div></main>"
                ),
                None,
            )
        if path == "/search":
            items = [
                r
                for r in recipes
                if matches(
                    f"{r['title']} {r['cuisine']} {' '.join(r['ingredients'])} {' '.join(r['diets'])}",
                    query.get("q", ""),
                )
            ]
            base = items
            if query.get("cuisine"):
                items = [r for r in items if r["cuisine"] == query["cuisine"]]
            if query.get("diet"):
                items = [r for r in items if query["diet"] in r["diets"]]
            if query.get("time"):
                items = [r for r in items if r["minutes"] <= int(query["time"])]
            order = query.get("sort", "")
            key = {
                "rating": lambda r: -r["rating"],
                "quickest": lambda r: r["minutes"],
                "reviews": lambda r: -r["reviews"],
            }.get(order)
            if key:
                items = sorted(items, key=key)
            side = (
                facet(
                    "Cuisine",
                    query,
                    "cuisine",
                    [(c, c) for c in sorted({r["cuisine"] for r in base})],
                )
                + facet(
                    "Diet", query, "diet", [(d, d) for d in ("vegetarian", "vegan", "gluten-free")]
                )
                + facet("Total time", query, "time", self.TIMES)
            )
            cards = (
                "".join(
                    f"<div class='card'><a href='/recipe/{esc(r['slug'])}'>{esc(r['title'])}</a>"
                    f"<div class='meta'>{esc(r['cuisine'])} &middot; {r['minutes']} min &middot; "
                    f"{stars(r['rating'])} ({r['reviews']} reviews)</div></div>"
                    for r in items
                )
                or "<p>No recipes match.</p>"
            )
            body = f"<main><aside>{side}</aside><div>{sorter(query, self.SORTS)}<p class='meta'>{len(items)} recipes</p>{cards}</div></main>"
            return 200, self.page("Recipes", body, query.get("q", "")), None
        if path.startswith("/recipe/"):
            r = next((r for r in recipes if r["slug"] == path.rsplit("/", 1)[1]), None)
            if r is None:
                return 404, self.page("Not found", "<main>No such recipe.</main>"), None
            ing = "".join(f"<li>{esc(i)}</li>" for i in r["ingredients"])
            diets = ", ".join(r["diets"]) or "none"
            body = (
                f"<main><div><h1>{esc(r['title'])}</h1><p class='meta'>Cuisine: {esc(r['cuisine'])} | "
                f"Diet: {esc(diets)}</p><p>Rating: {stars(r['rating'])} ({r['reviews']} reviews)</p>"
                f"<table><tr><th>Total time</th><td>{r['minutes']} minutes</td></tr><tr><th>Servings</th>"
                f"<td>{r['servings']}</td></tr><tr><th>Calories per serving</th><td>{r['calories']}</td></tr></table>"
                f"<h2>Ingredients</h2><ul>{ing}</ul></div></main>"
            )
            return 200, self.page(r["title"], body), None
        return 404, self.page("Not found", "<main>Page not found.</main>"), None


class Dictionary(Site):
    name, title = "dictionary", "Pomona Dictionary"

    def route(
        self, method: str, path: str, query: dict[str, str], form: dict[str, str]
    ) -> tuple[int, str, str | None]:
        words = self.data["words"]
        if path == "/":
            letters = sorted({w["word"][0].upper() for w in words})
            links = " ".join(f"<a href='/browse/{c.lower()}'>{c}</a>" for c in letters)
            return (
                200,
                self.page(
                    self.title,
                    f"<main><div><h2>Browse the dictionary</h2><p>{links}</p></div></main>",
                ),
                None,
            )
        if path == "/search" or path.startswith("/browse/"):
            if path == "/search":
                q = query.get("q", "").strip().lower()
                exact = next((w for w in words if w["word"] == q), None)
                if exact:
                    return 302, "", f"/word/{exact['word']}"
                found = [w for w in words if q and (q in w["word"] or matches(w["definition"], q))]
            else:
                letter = path.rsplit("/", 1)[1][:1]
                found = [w for w in words if w["word"].startswith(letter)]
            cards = "".join(
                f"<div class='card'><a href='/word/{esc(w['word'])}'>{esc(w['word'])}</a>"
                f"<div class='meta'>{esc(w['pos'])}</div></div>"
                for w in sorted(found, key=lambda w: w["word"])
            )
            return (
                200,
                self.page(
                    "Dictionary",
                    f"<main><div>{cards or '<p>No entries found.</p>'}</div></main>",
                    query.get("q", ""),
                ),
                None,
            )
        if path.startswith("/word/"):
            w = next((w for w in words if w["word"] == path.rsplit("/", 1)[1]), None)
            if w is None:
                return 404, self.page("Not found", "<main>No such entry.</main>"), None
            syn = ", ".join(w["synonyms"]) or "none listed"
            body = (
                f"<main><div><h1>{esc(w['word'])}</h1><p class='meta'>{esc(w['pos'])} &middot; "
                f"/{esc(w['pronunciation'])}/</p><h3>Meaning</h3><p>{esc(w['definition'])}</p>"
                f"<h3>Example</h3><p><i>{esc(w['example'])}</i></p><h3>Synonyms</h3><p>{esc(syn)}</p>"
                f"<h3>Origin</h3><p>{esc(w['origin'])}</p></div></main>"
            )
            return 200, self.page(w["word"], body), None
        return 404, self.page("Not found", "<main>Page not found.</main>"), None


class Search(Site):
    """The local stand-in for a web search engine (WebVoyager's `Google` action lands here)."""

    name, title = "search", "Pomona Search"

    def __init__(self, data: dict, state: State, sites: dict[str, Site]):
        super().__init__(data, state)
        self.sites = sites

    def documents(self) -> list[tuple[str, str, str]]:
        docs = [
            (
                f"http://shop.{DOMAIN}/product/{p['id']}",
                p["name"],
                f"{p['category']} · ${p['price']:.2f}",
            )
            for p in self.sites["shop"].data["products"]
        ]
        docs += [
            (
                f"http://recipes.{DOMAIN}/recipe/{r['slug']}",
                r["title"],
                f"{r['cuisine']} recipe · {r['minutes']} min",
            )
            for r in self.sites["recipes"].data["recipes"]
        ]
        docs += [
            (
                f"http://dictionary.{DOMAIN}/word/{w['word']}",
                f"{w['word']} - definition",
                w["definition"],
            )
            for w in self.sites["dictionary"].data["words"]
        ]
        docs += [
            (f"http://{s}.{DOMAIN}/", self.sites[s].title, "home page")
            for s in ("shop", "recipes", "dictionary")
        ]
        return docs

    def route(
        self, method: str, path: str, query: dict[str, str], form: dict[str, str]
    ) -> tuple[int, str, str | None]:
        if path == "/":
            return (
                200,
                self.page(self.title, "<main><div><p>Search the local web.</p></div></main>"),
                None,
            )
        if path == "/search":
            q = query.get("q", "")
            hits = [d for d in self.documents() if q.strip() and matches(f"{d[1]} {d[2]}", q)][:10]
            cards = (
                "".join(
                    f"<div class='card'><a href='{esc(u)}'>{esc(t)}</a><div class='meta'>{esc(u)}"
                    f"<br>{esc(s)}</div></div>"
                    for u, t, s in hits
                )
                or "<p>No results.</p>"
            )
            return 200, self.page(f"{q} - search", f"<main><div>{cards}</div></main>", q), None
        return 404, self.page("Not found", "<main>Page not found.</main>"), None


class Hazards(Site):
    """Pages that misbehave the ways real pages do, for the watchdog's tests and any agent's:
    an endless script, endless dialogs, a load that never ends, a flood of popups, downloads, a
    link to the machine's own files. Responses that never finish are `Stall` answers the
    handler acts out (the other sites only ever answer at once)."""

    name, title = "hazards", "Pomona Hazards"
    LINKS = [
        ("/loop", "An endless script"), ("/alerts", "Endless alerts"), ("/confirm", "A question"),
        ("/stall", "A page that never answers"), ("/trickle", "A page that never finishes"),
        ("/popups", "Popups"), ("/downloads", "Downloads"), ("/local", "The machine's files"),
    ]  # fmt: skip

    def route(
        self, method: str, path: str, query: dict[str, str], form: dict[str, str]
    ) -> tuple[int, str, str | None]:
        pages = {
            "/": "<ul>"
            + "".join(f"<li><a href='{u}'>{esc(t)}</a></li>" for u, t in self.LINKS)
            + "</ul>",
            "/loop": "<button onclick='for (;;) {}'>Start</button>",
            "/alerts": "<button onclick=\"for (;;) alert('again')\">Start</button>",
            "/confirm": "<button onclick=\"document.getElementById('out').textContent = "
            "confirm('Delete everything?') ? 'deleted' : 'kept'\">Delete</button>"
            "<p id='out'>untouched</p>",
            "/popups": "<a href='/tab' target='_blank'>Open a tab</a> "
            "<button onclick=\"for (let i = 0; i < 30; i++) window.open('/tab?n=' + i)\">"
            "Open 30 windows</button>",
            "/tab": f"<p>A new tab ({esc(query.get('n', 'link'))}).</p>"
            "<button onclick='window.close()'>Close this tab</button>",
            "/downloads": "<a href='/files/report.txt'>Get the report</a> "
            "<a href='/files/big.bin'>Get the big file</a> "
            '<button onclick="for (let i = 0; i < 30; i++) { const a = '
            "document.createElement('a'); a.href = '/files/report.txt?n=' + i; a.download = "
            "'r' + i + '.txt'; document.body.appendChild(a); a.click(); }\">Get 30 files</button>",
            "/local": "<a href='file:///etc/passwd'>Open /etc/passwd</a>",
        }
        if path in ("/stall", "/trickle") or path.startswith("/files/"):
            raise Stall(path)
        if path not in pages:
            return 404, self.page("Not found", "<main>Page not found.</main>"), None
        return 200, self.page(self.title, f"<main><div>{pages[path]}</div></main>"), None


class Stall(Exception):  # noqa: N818 - not an error: a response the handler acts out
    """An answer that is not a page at once: `/stall` (nothing, ever), `/trickle` (the start of
    a page, then nothing), `/files/NAME` (a download; big.bin is endless)."""


class Widgets(Site):
    """Every kind of control an agent meets, each reporting what was done to it in the page (and
    by a GET the state log records): selects, a hover menu, a double-click target, keys, a
    checkbox, a text area, an iframe, a form posted to the log."""

    name, title = "widgets", "Pomona Widgets"

    def route(
        self, method: str, path: str, query: dict[str, str], form: dict[str, str]
    ) -> tuple[int, str, str | None]:
        if path == "/frame":
            body = "<main><button onclick=\"report('framed')\">Inside the frame</button></main>"
            return 200, self.page("Frame", body + REPORT), None
        if path == "/done":
            return 200, self.page("Done", f"<main><p>{esc(json.dumps(query))}</p></main>"), None
        if path != "/":
            return 404, self.page("Not found", "<main>Page not found.</main>"), None
        body = (
            "<main><div><p id='out'>nothing yet</p>"
            "<label>Colour <select id='colour' onchange=\"report('colour=' + this.value)\">"
            "<option value=''>choose</option><option value='red'>Red</option>"
            "<option value='green'>Green</option><option value='blue'>Blue</option></select>"
            "</label>"
            "<div id='menu' onmouseenter=\"document.getElementById('hidden').style.display="
            "'block'\">Menu<div id='hidden' style='display:none'><a href='/done?via=menu'>"
            "Hidden item</a></div></div>"
            "<span id='twice' ondblclick=\"report('double')\">Double-click me</span>"
            "<input id='keys' aria-label='Keys' onkeydown=\"report('key=' + event.key)\">"
            "<label><input type='checkbox' id='agree' onchange=\"report('agree=' + "
            'this.checked)">I agree</label>'
            "<textarea id='notes' aria-label='Notes'></textarea>"
            "<form action='/done' method='get'><input name='name' aria-label='Name'>"
            "<button type='submit'>Send</button></form>"
            "<iframe src='/frame' title='A frame' width='300' height='80'></iframe>"
            f"</div></main>{REPORT}"
        )
        return 200, self.page(self.title, body), None


REPORT = (
    "<script>function report(what) { document.getElementById('out') && "
    "(document.getElementById('out').textContent = what); fetch('/done?event=' + "
    "encodeURIComponent(what)); }</script>"
)


def act_out(handler: BaseHTTPRequestHandler, path: str) -> None:
    """Act out a Hazards answer that is not a page at once."""
    if path == "/stall":
        time.sleep(STALL)
        return
    if path == "/trickle":
        handler.send_response(200)
        handler.send_header("Content-Type", "text/html; charset=utf-8")
        handler.end_headers()
        handler.wfile.write(b"<!doctype html><html><body><p>The start of a page")
        handler.wfile.flush()
        time.sleep(STALL)
        return
    name = path.rsplit("/", 1)[1]
    handler.send_response(200)
    handler.send_header("Content-Type", "application/octet-stream")
    handler.send_header("Content-Disposition", f"attachment; filename={quote(name)}")
    if name != "big.bin":
        body = b"A small report.\n"
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
        return
    handler.end_headers()
    chunk = b"\0" * 65536
    with contextlib.suppress(OSError):  # the browser gave up on it
        for _ in range(STALL * 100):
            handler.wfile.write(chunk)
            time.sleep(0.01)


def make_handler(
    sites: dict[str, Site], state: State, miniwob: Path | None
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # the state log is the record
            pass

        def do_GET(self) -> None:
            self.handle_request("GET")

        def do_POST(self) -> None:
            self.handle_request("POST")

        def handle_request(self, method: str) -> None:
            host = (self.headers.get("Host") or "").split(":")[0].lower()
            name = host[: -len(DOMAIN) - 1] if host.endswith("." + DOMAIN) else ""
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            form: dict[str, str] = {}
            if method == "POST":
                length = min(int(self.headers.get("Content-Length") or 0), 65536)
                form = {
                    k: v[-1]
                    for k, v in parse_qs(self.rfile.read(length).decode("utf-8", "replace")).items()
                }
            if name == "miniwob" and miniwob is not None:
                return self.static(miniwob, url.path)
            site = sites.get(name)
            if site is None:
                status, body, location = 404, "<h1>No such site on the local web</h1>", None
            else:
                try:
                    status, body, location = site.route(method, url.path, query, form)
                except Stall:
                    state.log(site=name, method=method, path=url.path, query=query, status=0)
                    return act_out(self, url.path)
                except (ValueError, KeyError):
                    status, body, location = (
                        400,
                        site.page("Bad request", "<main>Bad request.</main>"),
                        None,
                    )
            state.log(site=name or host, method=method, path=url.path, query=query, status=status)
            self.respond(status, body.encode(), "text/html; charset=utf-8", location)

        def static(self, root: Path, path: str) -> None:
            target = (root / path.lstrip("/")).resolve()
            if not target.is_relative_to(root) or not target.is_file():
                return self.respond(404, b"not found", "text/plain", None)
            kind = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
            self.respond(200, target.read_bytes(), kind, None)

        def respond(self, status: int, body: bytes, kind: str, location: str | None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            if location:
                self.send_header("Location", location)
            self.end_headers()
            self.wfile.write(body)

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8800)
    parser.add_argument(
        "--data", required=True, help="directory with shop.json, recipes.json, dictionary.json"
    )
    parser.add_argument("--state", required=True, help="the JSON-lines state log to write")
    parser.add_argument(
        "--miniwob", help="MiniWoB++'s html directory, served as miniwob.pomona.test"
    )
    args = parser.parse_args()
    data = Path(args.data)
    state = State(args.state)
    sites: dict[str, Site] = {
        "shop": Shop(json.loads((data / "shop.json").read_text()), state),
        "recipes": Recipes(json.loads((data / "recipes.json").read_text()), state),
        "dictionary": Dictionary(json.loads((data / "dictionary.json").read_text()), state),
    }
    sites["search"] = Search({}, state, sites)
    sites["hazards"] = Hazards({}, state)
    sites["widgets"] = Widgets({}, state)
    miniwob = Path(args.miniwob).resolve() if args.miniwob else None
    server = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(sites, state, miniwob))
    server.daemon_threads = True
    state.log(event="ready", port=args.port)
    server.serve_forever()


if __name__ == "__main__":
    main()
