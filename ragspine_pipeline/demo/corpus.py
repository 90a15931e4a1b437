"""Demo content as data: the policy knowledge base of Kestrel, an imaginary software company, the golden set
that tests the reference engine on it, and the questions its employees ask in production.

* :data:`DOCUMENTS` — one entry per document version. Every section becomes one chunk of 1–3 sentences,
  each sentence labelled with the answer point it states. Current, permitted documents get chunk ids
  ``<document>#<n>``; a superseded version (``current=False``) gets ``<document>@<version>#<n>``.
  Restricted documents (``permitted=False``: salary bands, postmortem details, a legal-hold memo,
  credentials) and superseded ones deliberately match some golden questions strongly, so that an engine
  that does not enforce the ACL retrieves them.
* :data:`GOLDEN_CASES` — layered cases (``case_id``, ``question``, ``answerable``,
  ``required_source_ids``, ``required_points``, ``tags``); unanswerable ones sound in-domain but nothing
  the engine may read answers them.
* :data:`PRODUCTION_QUESTIONS` — per workflow, what people ask (``answerable``) and what they ask that
  the knowledge base cannot answer (``unanswerable``).

The finance knowledge base and its RAGSpine-style cases (workflow ``finance-reporting``) live in
:mod:`ragspine_pipeline.demo.finance`; :func:`chunk_rows` and :data:`GOLDEN_CASES` include them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ragspine_pipeline.demo.finance import FINANCE_CASES, finance_chunk_rows


@dataclass(frozen=True)
class Section:
    """One chunk: a heading and its sentences, each with the answer point it states."""

    heading: str
    sentences: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Document:
    document_id: str
    title: str
    workflow: str
    version: str
    sections: tuple[Section, ...]
    permitted: bool = True
    current: bool = True


def _doc(document_id, title, workflow, version, *sections, permitted=True, current=True) -> Document:
    return Document(
        document_id,
        title,
        workflow,
        version,
        tuple(Section(heading, tuple(sentences)) for heading, *sentences in sections),
        permitted,
        current,
    )


# fmt: off
DOCUMENTS: tuple[Document, ...] = (
    # -- release-freeze ---------------------------------------------------------------------------
    _doc(
        "freeze-policy", "Release freeze policy", "release-freeze", "v3",
        ("Scope",
         ("A release freeze stops all production deployments of customer-facing services.",
          "freeze stops customer-facing deployments"),
         ("Internal tools and documentation sites are not covered by a freeze.",
          "internal tools not covered")),
        ("Quarterly freeze",
         ("The quarterly freeze starts at 18:00 UTC on the last Friday of each quarter.",
          "starts 18:00 UTC last friday of quarter"),
         ("It ends at 09:00 UTC on the following Tuesday, when the release manager lifts it.",
          "ends 09:00 UTC following tuesday")),
        ("Holiday freeze",
         ("A holiday freeze runs from December 20 to January 3 every year.",
          "holiday freeze december 20 to january 3"),
         ("During the holiday freeze only severity-1 fixes may be deployed.",
          "only severity-1 fixes during holiday freeze")),
        ("Announcements",
         ("The release manager announces every freeze in the #releases channel at least five business "
          "days in advance.", "announced five business days ahead")),
        ("Feature flags and migrations",
         ("Toggling an existing feature flag is allowed during a freeze.", "toggling existing flags allowed"),
         ("Creating a new feature flag counts as a deployment and is blocked.", "new flags blocked"),
         ("Database migrations are not allowed during a freeze, even backwards-compatible ones.",
          "no database migrations during freeze")),
    ),
    _doc(
        "freeze-exceptions", "Freeze exception process", "release-freeze", "v2",
        ("Requesting an exception",
         ("To request a freeze exception, open a FRZ ticket that links the change, its rollback plan and "
          "the expected customer impact.", "FRZ ticket with change rollback plan and impact"),
         ("Exception requests are filed at least 24 hours before the planned deployment.",
          "filed 24 hours before deployment")),
        ("Approval",
         ("The release manager approves freeze exceptions in writing on the FRZ ticket.",
          "release manager approves in writing"),
         ("Exceptions for changes that touch billing also need sign-off from the head of finance "
          "engineering.", "billing changes need head of finance engineering")),
        ("Security fixes",
         ("Emergency security fixes may ship during a freeze with two reviewers from the platform team.",
          "security fixes need two platform reviewers"),
         ("The security on-call engineer stays on the call for the whole deployment.",
          "security on-call present during deployment")),
        ("Review",
         ("Every exception granted during a freeze is discussed in the first release retrospective after "
          "the freeze.", "exceptions discussed in retrospective")),
    ),
    _doc(
        "release-calendar", "Release calendar", "release-freeze", "v1",
        ("Release days",
         ("Regular production releases go out on Tuesdays and Thursdays between 10:00 and 15:00 UTC.",
          "releases tuesdays and thursdays 10:00-15:00 UTC"),
         ("Nothing is released on Fridays without an approved exception.", "no friday releases")),
        ("Publishing the calendar",
         ("The release manager publishes the release calendar in Release Hub every Monday.",
          "calendar published in release hub on mondays")),
    ),
    _doc(
        "freeze-policy", "Release freeze policy", "release-freeze", "v2",
        ("Quarterly freeze",
         ("The quarterly freeze starts on the Monday of the last week of each quarter.",
          "starts monday of last week of quarter"),
         ("It ends on the first business day of the next quarter.", "ends first business day of quarter")),
        ("Approval",
         ("Freeze exceptions are approved by the VP of Engineering by email.", "vp approves by email")),
        current=False,
    ),
    _doc(
        "freeze-policy", "Release freeze policy", "release-freeze", "v1",
        ("Quarterly freeze",
         ("The quarterly freeze starts two weeks before the end of each quarter.",
          "starts two weeks before quarter end"),
         ("The freeze ends when the quarter closes.", "ends when quarter closes")),
        current=False,
    ),
    # -- incident-response ------------------------------------------------------------------------
    _doc(
        "incident-policy", "Incident response policy", "incident-response", "v4",
        ("Severity levels",
         ("Severity 1 means a full outage of a customer-facing service or confirmed data loss.",
          "sev-1 is full outage or data loss"),
         ("Severity 2 means a major feature is degraded for more than ten percent of customers.",
          "sev-2 is major feature degraded for 10% of customers")),
        ("Paging",
         ("A severity-1 incident pages the on-call engineer and the incident commander within five "
          "minutes.", "sev-1 pages on-call and incident commander within 5 minutes"),
         ("Severity-2 incidents page only the on-call engineer of the owning team.",
          "sev-2 pages owning team on-call")),
        ("Incident commander",
         ("The incident commander coordinates the response, assigns a scribe and decides when the "
          "incident is resolved.", "commander coordinates, assigns scribe, declares resolved"),
         ("The commander does not debug the problem personally.", "commander does not debug")),
        ("Incident channel",
         ("Every incident gets a dedicated Slack channel named inc-<date>-<short-name>, opened by the "
          "first responder.", "dedicated slack channel per incident")),
        ("Escalation to leadership",
         ("A severity-1 incident that is not mitigated within one hour is escalated to the VP of "
          "Engineering.", "sev-1 escalated to VP after one hour")),
    ),
    _doc(
        "postmortem-guide", "Postmortem guide", "incident-response", "v2",
        ("When a postmortem is due",
         ("A blameless postmortem is written within five business days of every severity-1 or severity-2 "
          "incident.", "postmortem within five business days"),
         ("The incident commander owns the postmortem document.", "commander owns postmortem")),
        ("Contents",
         ("Each postmortem lists a timeline, the root cause, the customer impact and at least one action "
          "item with an owner and a due date.", "timeline, root cause, impact and owned action items")),
        ("Follow-up",
         ("Postmortems are reviewed in the weekly reliability review on Wednesdays.",
          "reviewed in wednesday reliability review"),
         ("Action items from severity-1 postmortems are closed within thirty days.",
          "sev-1 action items closed within 30 days")),
    ),
    _doc(
        "status-comms", "Customer communication during incidents", "incident-response", "v1",
        ("Status page",
         ("The support lead posts the first status page update within fifteen minutes of a severity-1 "
          "incident being declared.", "first status update within 15 minutes"),
         ("Further updates follow every thirty minutes until the incident is resolved.",
          "status updates every 30 minutes")),
        ("What updates say",
         ("Status page updates never name individual customers or speculate about the root cause.",
          "no customer names or root-cause speculation")),
        ("Enterprise customers",
         ("Enterprise customers on a premium support plan receive a direct email from their account "
          "manager for any severity-1 incident.", "premium customers emailed by account manager")),
    ),
    _doc(
        "incident-policy", "Incident response policy", "incident-response", "v3",
        ("Paging",
         ("A severity-1 incident pages the on-call engineer within fifteen minutes.",
          "sev-1 pages on-call within 15 minutes"),
         ("The incident commander joins when the outage lasts more than an hour.",
          "commander joins after an hour")),
        current=False,
    ),
    _doc(
        "incident-policy", "Incident response policy", "incident-response", "v2",
        ("Incident commander",
         ("The incident commander runs the incident call and debugs the problem with the on-call "
          "engineer.", "commander runs the call and debugs")),
        current=False,
    ),
    _doc(
        "postmortem-guide", "Postmortem guide", "incident-response", "v1",
        ("When a postmortem is due",
         ("A postmortem is written within ten business days of every severity-1 incident.",
          "postmortem within ten business days")),
        current=False,
    ),
    _doc(
        "postmortem-2026-07-payments", "Postmortem: July payments outage", "incident-response", "v1",
        ("Root cause and impact",
         ("The July severity-1 payments outage was caused by an expired signing key on the payment "
          "gateway.", "root cause expired signing key"),
         ("The customer impact reached 4,200 merchants over three hours.", "4,200 merchants impacted")),
        permitted=False,
    ),
    _doc(
        "security-incident-sec-2026-09", "Security incident SEC-2026-09", "incident-response", "v1",
        ("Summary",
         ("An access token leaked in a public repository and was used to reach the staging environment "
          "for three hours.", "token leaked, staging accessed"),
         ("The security team rotated every token of the affected service account.", "tokens rotated")),
        permitted=False,
    ),
    # -- access-requests --------------------------------------------------------------------------
    _doc(
        "access-policy", "Production access policy", "access-requests", "v5",
        ("Requesting production access",
         ("Production access requires an ACC ticket approved by the service owner.",
          "ACC ticket approved by service owner"),
         ("Access granted through the ticket expires automatically after eight hours.",
          "access expires after eight hours")),
        ("Read-only log access",
         ("Read-only access to production logs is granted to every engineer who completed the security "
          "training.", "read-only logs after security training"),
         ("Read-only log access does not need a ticket.", "read-only needs no ticket")),
        ("Customer data",
         ("Access to customer data requires a second approval from the data protection officer, in "
          "addition to the service owner.", "customer data needs DPO approval")),
        ("Contractors",
         ("Contractors receive production access only through a sponsor who is a full-time employee.",
          "contractors need employee sponsor"),
         ("A contractor's production access never lasts longer than four hours.",
          "contractor access max four hours")),
        ("Access reviews",
         ("Access reviews run every quarter.", "quarterly access reviews"),
         ("Each service owner confirms or revokes every standing permission within ten business days.",
          "owners confirm or revoke within ten business days")),
    ),
    _doc(
        "break-glass", "Break-glass access", "access-requests", "v2",
        ("When to use break-glass",
         ("Break-glass access is meant for emergencies in which the normal approval path is too slow, "
          "such as a severity-1 incident at night.", "break-glass for emergencies only")),
        ("Review of break-glass sessions",
         ("Every break-glass session is recorded and reviewed by the security team within one business "
          "day.", "security reviews break-glass within one business day"),
         ("Using break-glass without an open incident is a policy violation.",
          "break-glass without incident is a violation")),
        ("Credentials",
         ("Break-glass credentials are rotated automatically after each use.",
          "credentials rotated after each use")),
    ),
    _doc(
        "access-offboarding", "Access offboarding", "access-requests", "v1",
        ("Leavers",
         ("When an employee leaves Kestrel, IT revokes all their access on their last working day by "
          "18:00 local time.", "leaver access revoked last working day 18:00")),
        ("Team changes",
         ("When someone changes teams, the permissions of their previous team are removed after a "
          "two-week overlap.", "team change two-week overlap")),
        ("Service accounts",
         ("Every shared service account has a named owner and is reviewed every six months.",
          "service accounts owned and reviewed every six months")),
    ),
    _doc(
        "access-policy", "Production access policy", "access-requests", "v4",
        ("Requesting production access",
         ("Production access requires a ticket approved by the team lead.", "team lead approves ticket"),
         ("Production access expires after twenty-four hours.", "access expires after 24 hours")),
        current=False,
    ),
    _doc(
        "access-policy", "Production access policy", "access-requests", "v3",
        ("Requesting production access",
         ("Production access requires a ticket approved by the on-call lead and expires after twelve "
          "hours.", "on-call lead approves, expires after 12 hours")),
        current=False,
    ),
    _doc(
        "vpn-admin-runbook", "VPN administration runbook", "access-requests", "v1",
        ("Admin credentials",
         ("The VPN admin console password and the break-glass root credentials are stored in the "
          "security vault under ops/root.", "vpn admin password in vault")),
        permitted=False,
    ),
    # -- expenses ---------------------------------------------------------------------------------
    _doc(
        "expense-policy", "Expense policy", "expenses", "v4",
        ("Pre-approval",
         ("Expenses above 500 EUR need pre-approval from the budget owner before the purchase.",
          "above 500 EUR needs budget owner pre-approval")),
        ("Receipts and deadlines",
         ("Receipts are uploaded to Spendwise within thirty days of the purchase.",
          "receipts uploaded within thirty days"),
         ("Expense claims submitted more than ninety days after the purchase are rejected.",
          "claims after 90 days rejected")),
        ("Reimbursement",
         ("Approved expense claims are reimbursed with the next monthly payroll.",
          "reimbursed with next payroll")),
        ("Team meals",
         ("Team meals are reimbursed up to 40 EUR per person, alcohol excluded.",
          "team meals up to 40 EUR per person")),
        ("Home office",
         ("Home-office equipment such as monitors, chairs and keyboards is reimbursed up to 300 EUR per "
          "year.", "home office up to 300 EUR per year")),
    ),
    _doc(
        "travel-policy", "Travel policy", "expenses", "v3",
        ("Flights",
         ("Flights shorter than six hours are booked in economy class.", "economy under six hours"),
         ("Longer flights may be booked in premium economy with the budget owner's approval.",
          "premium economy for longer flights with approval")),
        ("Hotels",
         ("Hotels are booked through the travel portal with a nightly limit of 180 EUR.",
          "hotel limit 180 EUR per night"),
         ("The nightly hotel limit is 250 EUR in London, New York and Zurich.",
          "hotel limit 250 EUR in london new york zurich")),
        ("Meals while travelling",
         ("The daily meal allowance while travelling is 60 EUR and covers breakfast, lunch and dinner.",
          "daily meal allowance 60 EUR")),
        ("Conferences",
         ("Travel to a conference needs the manager's approval and a short summary shared with the team "
          "afterwards.", "conference travel needs manager approval and summary")),
    ),
    _doc(
        "corporate-card", "Corporate card", "expenses", "v2",
        ("Who gets a card",
         ("Corporate cards are issued to employees who travel more than four times a year or manage a "
          "vendor budget.", "card for frequent travellers or vendor budget owners")),
        ("Personal purchases",
         ("Personal purchases on a corporate card are repaid within fifteen days and reported to finance.",
          "personal purchases repaid within 15 days")),
        ("Lost cards",
         ("A lost corporate card is reported to the card provider immediately and to finance within one "
          "business day.", "lost card reported immediately")),
    ),
    _doc(
        "expense-policy", "Expense policy", "expenses", "v3",
        ("Pre-approval",
         ("Expenses above 250 EUR need pre-approval from the budget owner before the purchase.",
          "above 250 EUR needs pre-approval")),
        current=False,
    ),
    _doc(
        "travel-policy", "Travel policy", "expenses", "v2",
        ("Hotels",
         ("Hotels are booked through the travel portal with a nightly limit of 150 EUR in every city.",
          "hotel limit 150 EUR per night")),
        current=False,
    ),
    _doc(
        "salary-bands-2026", "Salary bands 2026", "expenses", "v1",
        ("Engineering managers",
         ("The salary band of an engineering manager at level M2 is 95,000 to 118,000 EUR.",
          "M2 manager band"),
         ("The salary band of an engineering manager at level M3 is 112,000 to 140,000 EUR.",
          "M3 manager band")),
        permitted=False,
    ),
    _doc(
        "executive-travel-exceptions", "Executive travel exceptions", "expenses", "v1",
        ("Flights and hotels",
         ("Board members may book business class on every flight.", "board flies business class"),
         ("Board members may exceed the nightly hotel limit without pre-approval.",
          "board exceeds hotel limit")),
        permitted=False,
    ),
    # -- data-retention ---------------------------------------------------------------------------
    _doc(
        "retention-policy", "Data retention policy", "data-retention", "v6",
        ("Application logs",
         ("Application logs are kept for 30 days in hot storage and then deleted.",
          "application logs kept 30 days")),
        ("Audit logs",
         ("Audit logs are retained for seven years in write-once storage because of financial "
          "regulation.", "audit logs retained seven years")),
        ("Customer content",
         ("Customer content is deleted within 30 days after the customer's contract ends.",
          "customer content deleted 30 days after contract end"),
         ("Content under a legal hold is not deleted until the hold is lifted.",
          "legal hold blocks deletion")),
        ("Support tickets",
         ("Support tickets are anonymised two years after they are closed.",
          "support tickets anonymised after two years")),
        ("Analytics events",
         ("Raw analytics events are aggregated after 13 months and the raw events are then deleted.",
          "raw analytics events deleted after 13 months")),
    ),
    _doc(
        "deletion-requests", "Handling deletion requests", "data-retention", "v2",
        ("Timelines",
         ("A customer deletion request is acknowledged within three business days.",
          "deletion request acknowledged in 3 business days"),
         ("The deletion is completed within thirty days of the request.",
          "deletion completed within 30 days")),
        ("Identity check",
         ("The privacy team verifies the identity of the requester before any data is deleted.",
          "privacy team verifies identity")),
        ("Backups",
         ("Deleted records disappear from backups when those backups expire; backups are never edited.",
          "deleted records leave backups when they expire")),
        ("Legal holds",
         ("The legal team requests a legal hold through a LEGAL ticket.", "legal hold via LEGAL ticket"),
         ("A legal hold suspends all deletion for the named customer.", "legal hold suspends deletion")),
    ),
    _doc(
        "backup-policy", "Backup policy", "data-retention", "v3",
        ("Schedule and retention",
         ("Production databases are backed up every six hours.", "backups every six hours"),
         ("Database backups are kept for 35 days.", "backups kept 35 days")),
        ("Protection and restore tests",
         ("Backups are encrypted and copied to a second region.", "backups encrypted in second region"),
         ("A restore test runs every month.", "monthly restore test")),
    ),
    _doc(
        "retention-policy", "Data retention policy", "data-retention", "v5",
        ("Application logs",
         ("Application logs are kept for 90 days in hot storage and then archived for one year.",
          "application logs kept 90 days")),
        ("Customer content",
         ("Customer content is deleted within 90 days after the customer's contract ends.",
          "customer content deleted 90 days after contract end")),
        current=False,
    ),
    _doc(
        "retention-policy", "Data retention policy", "data-retention", "v4",
        ("Customer content",
         ("Customer content is deleted 180 days after the contract ends.",
          "customer content deleted 180 days after contract end")),
        current=False,
    ),
    _doc(
        "legal-hold-memo-2026-03", "Legal hold memo 2026-03", "data-retention", "v1",
        ("Orion Retail",
         ("All customer content and audit logs of Orion Retail are preserved until the litigation ends.",
          "orion retail content preserved"),
         ("Deletion requests from Orion Retail must not be executed while the legal hold is active.",
          "orion deletion requests suspended")),
        permitted=False,
    ),
    # -- oncall -----------------------------------------------------------------------------------
    _doc(
        "oncall-handbook", "On-call handbook", "oncall", "v3",
        ("Rotation",
         ("Each team runs a weekly on-call rotation that hands over on Mondays at 10:00 local time.",
          "weekly rotation hands over monday 10:00")),
        ("Acknowledging pages",
         ("The primary on-call engineer acknowledges a page within five minutes during business hours.",
          "acknowledge within 5 minutes in business hours"),
         ("At night the primary on-call engineer acknowledges a page within fifteen minutes.",
          "acknowledge within 15 minutes at night")),
        ("Escalation",
         ("An unacknowledged page escalates to the secondary on-call engineer after ten minutes.",
          "escalates to secondary after 10 minutes"),
         ("It escalates to the engineering manager after twenty minutes.",
          "escalates to manager after 20 minutes")),
        ("New engineers",
         ("New engineers shadow two rotations before they join the schedule as primary on-call.",
          "shadow two rotations before primary")),
        ("Load and swaps",
         ("Nobody is on call more often than one week in four.", "at most one week in four"),
         ("Rotation swaps are arranged in PagerDuty at least two days ahead.",
          "swaps in pagerduty two days ahead")),
    ),
    _doc(
        "oncall-compensation", "On-call compensation", "oncall", "v2",
        ("Allowance",
         ("On-call engineers receive a flat allowance for each week on call, paid with the following "
          "month's salary.", "flat weekly allowance paid next month")),
        ("Time off in lieu",
         ("Time spent handling a page outside business hours is compensated as time off in lieu, at one "
          "and a half times the hours worked.", "time off in lieu at 1.5x")),
        ("Late start",
         ("After a night with more than two pages, the on-call engineer may start the next working day "
          "late without asking.", "late start after more than two night pages")),
    ),
    _doc(
        "oncall-handover", "On-call handover", "oncall", "v1",
        ("Handover note",
         ("The outgoing on-call engineer writes a handover note listing open incidents, silenced alerts "
          "and pending follow-ups.", "handover note lists incidents, silenced alerts, follow-ups")),
        ("Silenced alerts",
         ("A silenced alert expires after at most 48 hours and links a ticket.",
          "silenced alerts expire within 48 hours with ticket")),
        ("Runbooks",
         ("Every paging alert links its runbook in the ops wiki.", "paging alerts link runbook")),
    ),
    _doc(
        "oncall-handbook", "On-call handbook", "oncall", "v2",
        ("Acknowledging pages",
         ("The primary on-call engineer acknowledges a page within fifteen minutes at any time of day.",
          "acknowledge within 15 minutes always")),
        current=False,
    ),
    _doc(
        "oncall-allowance-rates-2026", "On-call allowance rates 2026", "oncall", "v1",
        ("Rates",
         ("The weekly on-call allowance is 450 EUR for primary on-call and 225 EUR for secondary on-call.",
          "allowance 450 EUR primary 225 EUR secondary")),
        permitted=False,
    ),
)
# fmt: on


def chunk_rows() -> list[dict[str, Any]]:
    """The corpus as ``corpus.jsonl`` rows (the evidence registry's fields plus ``title`` and ``points``;
    the finance rows also carry ``doc``, ``locator`` and ``figures``)."""
    rows = []
    for doc in DOCUMENTS:
        prefix = doc.document_id if doc.current else f"{doc.document_id}@{doc.version}"
        for n, section in enumerate(doc.sections, 1):
            rows.append(
                {
                    "chunk_id": f"{prefix}#{n}",
                    "document_id": doc.document_id,
                    "parent_id": f"{doc.document_id}/{_slug(section.heading)}",
                    "version": doc.version,
                    "permitted": doc.permitted,
                    "current": doc.current,
                    "title": f"{doc.title} — {section.heading}",
                    "text": " ".join(sentence for sentence, _ in section.sentences),
                    "points": [{"sentence": s, "point": p} for s, p in section.sentences],
                    "workflow": doc.workflow,
                }
            )
    return rows + finance_chunk_rows()


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def _case(case_id: str, workflow: str, difficulty: str, question: str, sources=(), points=()) -> dict:
    """A layered golden case; no sources means the question is unanswerable (only a refusal is right)."""
    return {
        "case_id": case_id,
        "question": question,
        "answerable": bool(sources),
        "required_source_ids": list(sources),
        "required_points": list(points),
        "tags": {"workflow": workflow, "difficulty": difficulty},
    }


_F, _I, _A, _E, _R, _O = (
    "release-freeze",
    "incident-response",
    "access-requests",
    "expenses",
    "data-retention",
    "oncall",
)

# fmt: off
GOLDEN_CASES: tuple[dict, ...] = (
    # -- release-freeze ---------------------------------------------------------------------------
    _case("FRZ-01", _F, "easy", "When does the quarterly release freeze start?",
          ["freeze-policy#2"], ["starts 18:00 UTC last friday of quarter"]),
    _case("FRZ-02", _F, "easy", "When does the quarterly freeze end?",
          ["freeze-policy#2"], ["ends 09:00 UTC following tuesday"]),
    _case("FRZ-03", _F, "easy", "Who approves a freeze exception?",
          ["freeze-exceptions#2"], ["release manager approves in writing"]),
    _case("FRZ-04", _F, "hard", "Can we ship an emergency security fix while the freeze is on?",
          ["freeze-exceptions#3"], ["security fixes need two platform reviewers"]),
    _case("FRZ-05", _F, "easy", "Which dates does the holiday freeze cover?",
          ["freeze-policy#3"], ["holiday freeze december 20 to january 3"]),
    _case("FRZ-06", _F, "hard", "Am I allowed to flip an existing feature flag during a freeze?",
          ["freeze-policy#5"], ["toggling existing flags allowed"]),
    _case("FRZ-07", _F, "easy", "How far in advance is a release freeze announced?",
          ["freeze-policy#4"], ["announced five business days ahead"]),
    _case("FRZ-08", _F, "hard", "What should a freeze exception request include?",
          ["freeze-exceptions#1"], ["FRZ ticket with change rollback plan and impact"]),
    _case("FRZ-09", _F, "easy", "Can I run a database migration during the freeze?",
          ["freeze-policy#5"], ["no database migrations during freeze"]),
    _case("FRZ-10", _F, "hard",
          "Which fixes may ship during the holiday freeze, and who reviews a security fix?",
          ["freeze-policy#3", "freeze-exceptions#3"],
          ["only severity-1 fixes during holiday freeze", "security fixes need two platform reviewers"]),
    _case("FRZ-11", _F, "easy", "What is the freeze budget for marketing launches?"),
    _case("FRZ-12", _F, "hard", "Which teams requested the most freeze exceptions this year?"),
    # -- incident-response ------------------------------------------------------------------------
    _case("INC-01", _I, "easy", "Who gets paged for a severity-1 incident?",
          ["incident-policy#2"], ["sev-1 pages on-call and incident commander within 5 minutes"]),
    _case("INC-02", _I, "easy", "When is the postmortem due after an incident?",
          ["postmortem-guide#1"], ["postmortem within five business days"]),
    _case("INC-03", _I, "easy", "What counts as a severity 1 incident?",
          ["incident-policy#1"], ["sev-1 is full outage or data loss"]),
    _case("INC-04", _I, "hard", "What does the incident commander do during an outage?",
          ["incident-policy#3"], ["commander coordinates, assigns scribe, declares resolved"]),
    _case("INC-05", _I, "easy", "How often do we update the status page during a severity-1 incident?",
          ["status-comms#1"], ["status updates every 30 minutes"]),
    _case("INC-06", _I, "hard", "What has to be in a postmortem?",
          ["postmortem-guide#2"], ["timeline, root cause, impact and owned action items"]),
    _case("INC-07", _I, "easy", "How quickly are action items from severity-1 postmortems closed?",
          ["postmortem-guide#3"], ["sev-1 action items closed within 30 days"]),
    _case("INC-08", _I, "hard", "Who owns the postmortem and by when is it written?",
          ["postmortem-guide#1"], ["postmortem within five business days", "commander owns postmortem"]),
    _case("INC-09", _I, "hard",
          "Who is paged for a severity-1 incident, and when is the first status page update posted?",
          ["incident-policy#2", "status-comms#1"],
          ["sev-1 pages on-call and incident commander within 5 minutes",
           "first status update within 15 minutes"]),
    _case("INC-10", _I, "hard", "What was the root cause of the July payments outage?"),
    _case("INC-11", _I, "easy", "Which monitoring vendor do we use for alerting?"),
    # -- access-requests --------------------------------------------------------------------------
    _case("ACC-01", _A, "easy", "What do I need to get production access?",
          ["access-policy#1"], ["ACC ticket approved by service owner"]),
    _case("ACC-02", _A, "easy", "When does my production access expire?",
          ["access-policy#1"], ["access expires after eight hours"]),
    _case("ACC-03", _A, "easy", "Who reviews break-glass sessions?",
          ["break-glass#2"], ["security reviews break-glass within one business day"]),
    _case("ACC-04", _A, "hard", "Can a contractor get production access?",
          ["access-policy#4"], ["contractors need employee sponsor"]),
    _case("ACC-05", _A, "easy", "Do I need a ticket for read-only access to production logs?",
          ["access-policy#2"], ["read-only needs no ticket"]),
    _case("ACC-06", _A, "hard", "Whose approval do I need to look at customer data?",
          ["access-policy#3"], ["customer data needs DPO approval"]),
    _case("ACC-07", _A, "easy", "When is access revoked after an employee leaves?",
          ["access-offboarding#1"], ["leaver access revoked last working day 18:00"]),
    _case("ACC-08", _A, "hard", "When am I allowed to use break-glass access?",
          ["break-glass#1"], ["break-glass for emergencies only"]),
    _case("ACC-09", _A, "hard",
          "How long does production access last for a contractor compared with an engineer's ticket?",
          ["access-policy#4", "access-policy#1"],
          ["contractor access max four hours", "access expires after eight hours"]),
    _case("ACC-10", _A, "easy", "How often do access reviews run?",
          ["access-policy#5"], ["quarterly access reviews"]),
    _case("ACC-11", _A, "hard", "What is the admin password for the VPN console?"),
    # -- expenses ---------------------------------------------------------------------------------
    _case("EXP-01", _E, "easy", "Which expenses need pre-approval?",
          ["expense-policy#1"], ["above 500 EUR needs budget owner pre-approval"]),
    _case("EXP-02", _E, "easy", "By when must receipts be uploaded?",
          ["expense-policy#2"], ["receipts uploaded within thirty days"]),
    _case("EXP-03", _E, "easy", "What is the hotel limit per night?",
          ["travel-policy#2"], ["hotel limit 180 EUR per night"]),
    _case("EXP-04", _E, "hard", "Can I book premium economy for a long flight to Singapore?",
          ["travel-policy#1"], ["premium economy for longer flights with approval"]),
    _case("EXP-05", _E, "easy", "How much is the daily meal allowance when travelling?",
          ["travel-policy#3"], ["daily meal allowance 60 EUR"]),
    _case("EXP-06", _E, "hard", "When are approved expense claims paid out?",
          ["expense-policy#3"], ["reimbursed with next payroll"]),
    _case("EXP-07", _E, "easy", "What is the limit for team meals?",
          ["expense-policy#4"], ["team meals up to 40 EUR per person"]),
    _case("EXP-08", _E, "hard", "What happens to an expense claim submitted four months after the purchase?",
          ["expense-policy#2"], ["claims after 90 days rejected"]),
    _case("EXP-09", _E, "easy", "Who is issued a corporate card?",
          ["corporate-card#1"], ["card for frequent travellers or vendor budget owners"]),
    _case("EXP-10", _E, "hard", "What is the hotel limit in London, and what is the daily meal allowance?",
          ["travel-policy#2", "travel-policy#3"],
          ["hotel limit 250 EUR in london new york zurich", "daily meal allowance 60 EUR"]),
    _case("EXP-11", _E, "easy", "What is the salary band of an engineering manager?"),
    _case("EXP-12", _E, "easy", "Can I expense a gym membership?"),
    # -- data-retention ---------------------------------------------------------------------------
    _case("RET-01", _R, "easy", "How long are application logs kept?",
          ["retention-policy#1"], ["application logs kept 30 days"]),
    _case("RET-02", _R, "easy", "How long do we retain audit logs?",
          ["retention-policy#2"], ["audit logs retained seven years"]),
    _case("RET-03", _R, "easy", "When is customer content deleted after the contract ends?",
          ["retention-policy#3"], ["customer content deleted 30 days after contract end"]),
    _case("RET-04", _R, "hard", "How quickly must a customer's deletion request be completed?",
          ["deletion-requests#1"], ["deletion completed within 30 days"]),
    _case("RET-05", _R, "easy", "How often are production databases backed up?",
          ["backup-policy#1"], ["backups every six hours"]),
    _case("RET-06", _R, "hard", "Are deleted records also removed from backups?",
          ["deletion-requests#3"], ["deleted records leave backups when they expire"]),
    _case("RET-07", _R, "easy", "When are support tickets anonymised?",
          ["retention-policy#4"], ["support tickets anonymised after two years"]),
    _case("RET-08", _R, "hard", "Who verifies the identity of someone asking for their data to be deleted?",
          ["deletion-requests#2"], ["privacy team verifies identity"]),
    _case("RET-09", _R, "hard",
          "Does a legal hold stop customer content from being deleted, and how is one requested?",
          ["retention-policy#3", "deletion-requests#4"],
          ["legal hold blocks deletion", "legal hold via LEGAL ticket"]),
    _case("RET-10", _R, "easy", "How long are database backups kept?",
          ["backup-policy#1"], ["backups kept 35 days"]),
    _case("RET-11", _R, "easy", "How long do we keep CCTV footage from the office?"),
    _case("RET-12", _R, "hard", "How long are Slack messages retained?"),
    # -- oncall -----------------------------------------------------------------------------------
    _case("ONC-01", _O, "easy", "When does the on-call rotation hand over?",
          ["oncall-handbook#1"], ["weekly rotation hands over monday 10:00"]),
    _case("ONC-02", _O, "easy", "How fast must the primary on-call acknowledge a page at night?",
          ["oncall-handbook#2"], ["acknowledge within 15 minutes at night"]),
    _case("ONC-03", _O, "easy", "What happens when nobody acknowledges a page?",
          ["oncall-handbook#3"], ["escalates to secondary after 10 minutes"]),
    _case("ONC-04", _O, "hard", "How many rotations do new engineers shadow before they go primary?",
          ["oncall-handbook#4"], ["shadow two rotations before primary"]),
    _case("ONC-05", _O, "easy", "How is time spent on pages outside business hours compensated?",
          ["oncall-compensation#2"], ["time off in lieu at 1.5x"]),
    _case("ONC-06", _O, "hard", "What goes into the on-call handover note?",
          ["oncall-handover#1"], ["handover note lists incidents, silenced alerts, follow-ups"]),
    _case("ONC-07", _O, "easy", "How long can an alert stay silenced?",
          ["oncall-handover#2"], ["silenced alerts expire within 48 hours with ticket"]),
    _case("ONC-08", _O, "hard", "Can I start late after a rough night on call?",
          ["oncall-compensation#3"], ["late start after more than two night pages"]),
    _case("ONC-09", _O, "hard",
          "Who does an unacknowledged page escalate to, and how fast does the primary acknowledge "
          "during business hours?",
          ["oncall-handbook#3", "oncall-handbook#2"],
          ["escalates to secondary after 10 minutes", "acknowledge within 5 minutes in business hours"]),
    _case("ONC-10", _O, "easy", "How often can someone be on call?",
          ["oncall-handbook#5"], ["at most one week in four"]),
    _case("ONC-11", _O, "hard", "How much is the weekly on-call allowance in euros?"),
    # -- finance-reporting (RAGSpine dialect, demo.finance) ---------------------------------------
    *FINANCE_CASES,
)
# fmt: on

PRODUCTION_QUESTIONS: dict[str, dict[str, tuple[str, ...]]] = {
    "release-freeze": {
        "answerable": (
            "When does the release freeze start this quarter?",
            "when does the code freeze begin",
            "What time does the quarterly freeze end on Tuesday?",
            "Who can approve an exception to the freeze?",
            "is the release manager the one who approves freeze exceptions?",
            "Can a security fix be deployed during the freeze?",
            "How many reviewers does an emergency security fix need during a freeze?",
            "When is the holiday freeze?",
            "Can I toggle a feature flag during the freeze?",
            "Is creating a new feature flag allowed in a freeze?",
            "Are database migrations allowed during the freeze?",
            "How do I request a freeze exception?",
            "How early do I have to file a freeze exception request?",
            "On which days do regular releases go out?",
            "Can I release on a Friday?",
            "Does the freeze cover internal tools?",
            "Do billing changes need extra sign-off during a freeze?",
        ),
        "unanswerable": (
            "What is the freeze budget for marketing launches?",
            "How many freeze exceptions were rejected last year?",
            "Can I deploy the mobile app to the App Store during the freeze?",
        ),
    },
    "incident-response": {
        "answerable": (
            "Who is paged for a sev-1?",
            "who gets paged when a severity-2 incident happens",
            "What is a severity 1 incident?",
            "What does severity 2 mean?",
            "When is a postmortem due?",
            "Who writes the postmortem?",
            "What goes into a postmortem?",
            "When are postmortems reviewed?",
            "How quickly do we post the first status page update?",
            "How often is the status page updated during an incident?",
            "What is the incident commander responsible for?",
            "Does the incident commander debug the issue?",
            "Where do we coordinate during an incident?",
            "When is a severity-1 incident escalated to the VP of Engineering?",
            "Do premium enterprise customers get an email during an outage?",
            "Can status page updates mention customers by name?",
        ),
        "unanswerable": (
            "What was the root cause of the July payments outage?",
            "Which monitoring vendor do we use for alerting?",
            "How many severity-1 incidents did we have in March?",
            "Which token leaked in the September security incident?",
        ),
    },
    "access-requests": {
        "answerable": (
            "How do I get production access?",
            "who approves production access tickets",
            "How long does production access last?",
            "When does my production access expire?",
            "Do I need a ticket to read production logs?",
            "Who reviews break-glass access?",
            "When can I use break-glass?",
            "Is using break-glass without an incident allowed?",
            "Can contractors get production access?",
            "How long can a contractor keep production access?",
            "Who needs to approve access to customer data?",
            "How often are access reviews run?",
            "When is access removed after someone leaves the company?",
            "What happens to my permissions when I change teams?",
            "Are break-glass credentials rotated?",
            "Who owns a shared service account?",
        ),
        "unanswerable": (
            "What is the admin password for the VPN console?",
            "Can I get root on the billing database for a week?",
            "Which laptop models does IT support?",
        ),
    },
    "expenses": {
        "answerable": (
            "Which expenses need pre-approval?",
            "do I need approval before buying something over 500 EUR",
            "By when do I have to upload my receipts?",
            "What happens if I submit an expense claim late?",
            "When will I be reimbursed for my expenses?",
            "What is the hotel limit per night?",
            "What is the hotel limit in New York?",
            "How much is the daily meal allowance on a trip?",
            "Can I fly premium economy?",
            "Which class do I book for a short flight?",
            "What is the limit for team dinners?",
            "How much can I spend on home office equipment?",
            "Who can get a corporate card?",
            "I lost my corporate card, what do I do?",
            "I paid something personal with the corporate card, what now?",
            "Do I need approval to travel to a conference?",
        ),
        "unanswerable": (
            "What is my manager's salary band?",
            "Can I expense a gym membership?",
            "What is the mileage rate for using my own car?",
            "Do board members fly business class?",
        ),
    },
    "data-retention": {
        "answerable": (
            "How long are application logs kept?",
            "How long do we keep audit logs?",
            "When is customer content deleted after a contract ends?",
            "how fast do we have to complete a deletion request",
            "How quickly is a deletion request acknowledged?",
            "Who verifies identity for deletion requests?",
            "Do deleted records get removed from backups?",
            "How often are production databases backed up?",
            "How long are database backups kept?",
            "Are backups encrypted?",
            "How often do we test restores?",
            "When are support tickets anonymised?",
            "How long are raw analytics events kept?",
            "How is a legal hold requested?",
            "Does a legal hold stop deletion?",
        ),
        "unanswerable": (
            "How long do we keep CCTV footage from the office?",
            "How long are Slack messages retained?",
            "Are Orion Retail's deletion requests on hold?",
        ),
    },
    "oncall": {
        "answerable": (
            "When does the on-call rotation hand over?",
            "How fast do I need to acknowledge a page?",
            "How fast must a page be acknowledged at night?",
            "What happens if a page is unacknowledged?",
            "When does a page escalate to the engineering manager?",
            "How many rotations do new engineers shadow?",
            "How often can someone be on call?",
            "How do I swap an on-call shift?",
            "How is on-call paid?",
            "Do I get time off after handling pages at night?",
            "Can I start late after a bad night on call?",
            "What should the on-call handover note contain?",
            "How long can an alert stay silenced?",
            "Where are the runbooks for paging alerts?",
        ),
        "unanswerable": (
            "How much is the weekly on-call allowance in euros?",
            "Which PagerDuty plan do we pay for?",
            "Can I be on call from abroad?",
        ),
    },
}
