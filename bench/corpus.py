"""A deterministic, synthetic work memory: entities of several kinds with two observations each, and
questions about them. Text from templates; used for volume, not for judging relevance (that is
tests/data/relevance.json)."""

from __future__ import annotations

import random
from dataclasses import dataclass


def _words(text: str, sep: str = "|") -> list[str]:
    return text.split(sep)


FIRST = _words(
    "Ada Alan Amara Aiko Bruno Carla Chen Dana Diego Elena Emil Farah Femi Grace Hana Ivan Jonas Kai Lena Luis "
    "Maya Mei Nadia Noor Omar Priya Rafael Rosa Sami Sofia Tariq Tomas Uma Vera Wei Yara Yusuf Zoe Kofi Ines",
    " ",
)
LAST = _words(
    "Alvarez Brandt Chen Costa Demir Diaz Fischer Garcia Haddad Herrera Ito Jensen Kim Kowalski Larsen Lopez "
    "Mensah Moreau Novak Okafor Park Patel Quinn Raman Rossi Silva Smith Tanaka Umar Vargas Weber Wong Yilmaz",
    " ",
)
ROLES = _words(
    "backend engineer|data engineer|product designer|site reliability engineer|engineering manager|"
    "account executive|support lead|security analyst|product manager|QA engineer"
)
TEAMS = _words("payments|platform|growth|data|mobile|security|infrastructure|support|billing|identity")
COMPONENTS = _words(
    "billing service|invoice pipeline|search index|login page|mobile app|data warehouse|payment gateway|"
    "notification service|reporting dashboard|API gateway|checkout page|fraud scoring model|email sender|"
    "webhook dispatcher|feature flag service|audit log|export job|admin console|rate limiter|session store"
)
TECH = _words("Kubernetes|PostgreSQL|Kafka|Redis|Terraform|React|Go|Python|gRPC|Elasticsearch|Spark|Airflow")
PROBLEMS = _words(
    "latency spikes|memory leak|expired certificate|connection pool exhaustion|stale cache|duplicate charges|"
    "slow queries|failed deploy|disk full|retry storm|timeouts to the processor|missing indexes"
)
ADJ = _words("amber|silent|rapid|northern|crimson|hidden|golden|quiet|electric|bright|frozen|gentle")
ANIMALS = _words("falcon|otter|heron|lynx|badger|raven|orca|fox|bison|marten|crane|viper")
MONTHS = _words("January February March April May June July August September October November December", " ")
CITIES = _words("Berlin|Lisbon|Madrid|Nairobi|Osaka|Toronto|Austin|Warsaw|Dublin|Seoul")
COMPANIES = _words("Globex|Initech|Umbrella|Hooli|Vandelay|Soylent|Tyrell|Wonka|Acme|Stark|Wayne|Cyberdyne")


@dataclass(frozen=True, slots=True)
class Entity:
    name: str
    type: str
    description: str
    observations: tuple[str, ...]


def _entity(i: int, r: random.Random) -> Entity:
    kind = i % 6
    team, comp, tech, prob = r.choice(TEAMS), r.choice(COMPONENTS), r.choice(TECH), r.choice(PROBLEMS)
    month, city = r.choice(MONTHS), r.choice(CITIES)
    if kind == 0:
        name = f"{r.choice(FIRST)} {r.choice(LAST)} {i}"
        return Entity(
            name,
            "person",
            f"{r.choice(ROLES)} on the {team} team",
            (f"owns the {comp} and reviews its {tech} changes", f"works from the {city} office since {month}"),
        )
    if kind == 1:
        name = f"Project {r.choice(ADJ).title()} {r.choice(ANIMALS).title()} {i}"
        return Entity(
            name,
            "project",
            f"rebuilds the {comp} for the {team} team",
            (f"moves the {comp} to {tech} before {month}", f"blocked by {prob} in the staging environment"),
        )
    if kind == 2:
        name = f"{comp.title()} {i}"
        return Entity(
            name,
            "service",
            f"the {comp} run by the {team} team",
            (f"written in {tech} and deployed in {city}", f"had {prob} during the {month} release"),
        )
    if kind == 3:
        name = f"INC-{10000 + i}"
        return Entity(
            name,
            "incident",
            f"{prob} in the {comp}",
            (f"customers in {city} saw errors for {r.randint(5, 180)} minutes", f"follow-up: {team} team adds alerts"),
        )
    if kind == 4:
        name = f"{r.choice(COMPANIES)} {r.choice(['Labs', 'Group', 'Health', 'Bank', 'Retail'])} {i}"
        return Entity(
            name,
            "customer",
            f"customer in {city} using the {comp}",
            (f"contract renews in {month}", f"asked for {tech} integration and better {comp} reports"),
        )
    name = f"ADR-{i}: {tech} for the {comp}"
    return Entity(
        name,
        "decision",
        f"architecture decision of the {team} team",
        (f"chose {tech} because of {prob} with the old setup", f"to be revisited in {month}"),
    )


def entities(count: int, seed: int) -> list[Entity]:
    r = random.Random(seed)
    return [_entity(i, r) for i in range(count)]


def queries(count: int, seed: int) -> list[str]:
    r = random.Random(seed)
    shapes = [
        lambda: f"who owns the {r.choice(COMPONENTS)} on the {r.choice(TEAMS)} team?",
        lambda: f"what went wrong with {r.choice(PROBLEMS)} in the {r.choice(COMPONENTS)}",
        lambda: f"which customers in {r.choice(CITIES)} want {r.choice(TECH)}",
        lambda: f"why did we pick {r.choice(TECH)}",
        lambda: f"{r.choice(FIRST)} {r.choice(LAST)}",
        lambda: f"projects migrating to {r.choice(TECH)} this {r.choice(MONTHS)}",
        lambda: f"outage where customers saw errors in {r.choice(CITIES)}",
        lambda: f"INC-{10000 + 6 * r.randint(0, 999) + 3}",
    ]
    return [r.choice(shapes)() for _ in range(count)]
