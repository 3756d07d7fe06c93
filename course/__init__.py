"""The course built on the notebooks: its authoring (:mod:`course.workbooks`), grading (:mod:`course.grading`) and
the ``trgrpo course`` command (:mod:`course.cli`);
the instructor's reference answers are the data file course/answers.py."""
