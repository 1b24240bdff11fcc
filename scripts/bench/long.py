"""long: whole aclsum papers as Markdown, through the pipeline's parts and combining pass."""

from __future__ import annotations

from scripts.bench.quality import _quality_pipeline


def run(args) -> dict:
    """Whole papers, many times the context, through the pipeline (parts and combining)."""
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
    words = sum(len(p["text"].split()) for p in chosen) / len(chosen)
    return {"mode": "long", "docs": len(chosen), "words": words, **found}


def report(result: dict) -> None:
    print(
        f"long      {result['docs']} whole aclsum papers as Markdown ({result['words']:,.0f} "
        f"words, {result['parts']:.1f} parts each): {result['stopped']} ended by stop, "
        f"{result['still_looped']} still loop"
    )
    s, lead = result["summaries"], result["lead"]
    print(
        f"  ROUGE-1/2/L {s['rouge1']:.3f} {s['rouge2']:.3f} {s['rougeL']:.3f}  lead "
        f"{result['lead_words']} words {lead['rouge1']:.3f} {lead['rouge2']:.3f} "
        f"{lead['rougeL']:.3f}"
    )
