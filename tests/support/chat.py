"""Real chats with a real llama-server: a document summarised turn by turn, several conversations at once."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

from paths import ROOT

TURN_CHARS = 60  # of the document per user turn: a step of about 5 % of a 2,048-cell pool for four chats


def document_turns(turn_chars: int = TURN_CHARS) -> list[str]:
    """The README in pieces of ``turn_chars`` characters: a user turn each."""
    text = " ".join((ROOT / "README.md").read_text().split())
    return [text[i : i + turn_chars] for i in range(0, len(text), turn_chars)]


def chat(url: str, messages: list[dict], max_tokens: int = 4) -> tuple[int, str]:
    body = json.dumps({"messages": messages, "max_tokens": max_tokens, "temperature": 0}).encode()
    request = urllib.request.Request(
        url + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=120) as reply:
            return 200, json.loads(reply.read())["choices"][0]["message"]["content"]
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def chat_turn(url: str, chats: list[list[dict]], text: list[str]) -> list[tuple[int, str]]:
    """Each conversation's next user turn, all four at once (the server batches them)."""
    answers: list[tuple[int, str]] = [(0, "")] * len(chats)

    def send(i: int) -> None:
        chats[i].append({"role": "user", "content": text[i]})
        answers[i] = chat(url, chats[i])
        if answers[i][0] == 200:
            chats[i].append({"role": "assistant", "content": answers[i][1]})

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(chats))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answers
