"""Rendering results for people: tables now; compare, JUnit and HTML later."""
