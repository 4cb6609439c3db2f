"""OpenAPI import: a document (3.0, 3.1 or Swagger 2.0) becomes one ``http`` tool per operation.

``document`` reads and checks the text, ``schemas`` turns OpenAPI schemas into JSON Schema
2020-12, ``operations`` turns each operation into a tool definition (or a reason it cannot be
one), ``services`` previews and applies an import, ``models`` keeps the document.
"""
