"""long: whole aclsum papers as Markdown, through the pipeline's parts and combining pass,
against each paper's first part summarized alone."""

from __future__ import annotations

import os

from scripts.bench.quality import _quality_pipeline


def run(args) -> dict:
    """Whole papers, many times the context, through the pipeline (parts and combining); then
    the same papers cut to their first part, the text the first window of the whole holds."""
    from aclsum import ACLSum

    chosen = []
    for doc in ACLSum("train").documents[: args.long_papers]:
        paper = doc.get_fulltext_parse()
        lines = [f"# {paper['title']}", "", paper.get("abstract") or ""]
        section = None
        for paragraph in paper["pdf_parse"]["body_text"]:
            if paragraph.get("section") and paragraph["section"] != section:
                section = paragraph["section"]
                lines += ["", f"## {section}"]
            lines += ["", paragraph["text"]]
        reference = " ".join(doc.summaries[k] for k in ("challenge", "approach", "outcome"))
        chosen.append({"name": f"{doc.id}.md", "text": "\n".join(lines), "reference": reference})
    found = _quality_pipeline(args, chosen)
    first = _quality_pipeline(args, [p | {"text": _first_part(p["text"])} for p in chosen])
    words = sum(len(p["text"].split()) for p in chosen) / len(chosen)
    return {"mode": "long", "docs": len(chosen), "words": words, **found, "first_part": first}


def _first_part(text: str) -> str:
    """The paper's first part: as many of its tokens as the pipeline's first window holds
    (worker/parts.py's window under the default settings), decoded."""
    from transformers import AutoTokenizer

    from core.settings import Settings
    from worker.engine import chat_prompt_ids, plain_ids
    from worker.parts import PROMPT_SLACK_TOKENS

    settings = Settings.from_env()
    model = os.environ.get("SUMMARIZE_MODEL") or settings.default_model_dir
    tokenizer = AutoTokenizer.from_pretrained(str(model))
    overhead = len(chat_prompt_ids(tokenizer, settings.instruction, ""))
    profile = settings.profile
    window = profile.max_model_len - profile.max_tokens - overhead - PROMPT_SLACK_TOKENS
    return tokenizer.decode(plain_ids(tokenizer, text)[:window])


def report(result: dict) -> None:
    flaws = result.get("flaws") or {}
    print(
        f"long      {result['docs']} whole aclsum papers as Markdown ({result['words']:,.0f} "
        f"words, {result['parts']:.1f} parts each): {result['stopped']} ended by stop, "
        f"{result['still_looped']} still loop, {flaws.get('leaked', 0)} leak the instruction, "
        f"{flaws.get('repeated', 0)} say a sentence twice"
    )
    first = result["first_part"]
    for label, r in (("whole", result), ("first part alone", first)):
        s, lead = r["summaries"], r["lead"]
        print(
            f"  {label:<17} ROUGE-1/2/L {s['rouge1']:.3f} {s['rouge2']:.3f} {s['rougeL']:.3f}"
            f"  lead {r['lead_words']} words {lead['rouge1']:.3f} {lead['rouge2']:.3f} "
            f"{lead['rougeL']:.3f}"
        )
