{{ base }}

# ---- the grader ----
# The judge starts one fresh container of this image per evaluation (no network, one GPU, this
# non-root user) and removes it afterwards. Built from the repository root:
#   docker build -f images/grader-{{ dsl }}.Dockerfile -t {{ image }} .
RUN useradd --create-home --uid 61000 grader && mkdir /work && chown grader /work
COPY pyproject.toml /src/
COPY metakernelbench/ /src/metakernelbench/
COPY problems/ /opt/mkb/problems/
RUN touch /src/README.md && pip install --no-deps --no-build-isolation /src && rm -rf /src \
 && python -c "import metakernelbench.verifier.grader, metakernelbench.judge.runner"
USER grader
WORKDIR /work
