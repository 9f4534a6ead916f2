// The job page: to be written (issue 27); the shell and console.js are in place.
"use strict";
