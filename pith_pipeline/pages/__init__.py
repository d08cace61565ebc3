"""Static pages in the store: a page per record, a home page, their assets.

`render` turns data into HTML (pure); `site` decides what a store holds and
checks it. The browser verifies each record itself (`assets/pith-verify.js`).
"""
